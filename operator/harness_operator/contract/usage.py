"""Token counts, the one shape the runner, the model gateway and the operator count tokens in, and the
one sum of all of them (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Tokens:
    """Token counts: input (cache reads and writes not included), output, cache read, cache write; None
    means not reported."""

    input: int | None = None
    output: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None

    def plus(self, other: Tokens) -> Tokens:
        return Tokens(*(_add(a, b) for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def minus(self, other: Tokens) -> Tokens:
        return Tokens(
            *(
                None if a is None else max(0, a - (b or 0))
                for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)
            )
        )

    def as_tuple(self) -> tuple[int | None, int | None, int | None, int | None]:
        return (self.input, self.output, self.cache_read, self.cache_write)

    @property
    def known(self) -> bool:
        return any(v is not None for v in self.as_tuple())

    @property
    def total(self) -> int | None:
        """All tokens: input, output, cache read and write; None when none is known."""
        known = [v for v in self.as_tuple() if v is not None]
        return sum(known) if known else None


# The names a Usage or a meter gives the counts, in Tokens' order.
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class TokenFields(Protocol):
    """What names its counts `input_tokens`, ...: the API's Usage, the gateway's meter."""

    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cache_read_tokens(self) -> int | None: ...
    @property
    def cache_write_tokens(self) -> int | None: ...


def tokens_of(usage: TokenFields | None) -> Tokens:
    """The token counts of a usage or a meter; none known of None."""
    if usage is None:
        return Tokens()
    return Tokens(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens)


def _add(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)
