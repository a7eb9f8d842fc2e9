"""The meters, in Redis, shared by every gateway replica (I/O).

One hash per run (`meter:<run uid>`) and one per attempt (`meter:<run uid>:<attempt>`): what it spent, the
tokens it used, and the worst cases held for requests in flight. A request reserves its worst case before
it is forwarded and settles its real usage after, each one Lua script (atomic in Redis) that writes both
hashes. The caps are checked against the run's hash: they bind all its attempts together, and concurrent
requests of a run, on any replica and through any of its tokens, never together pass its cap by more than
their clamped worst cases allow. A gateway killed mid-request leaves its reservation held: the run is
billed that worst case, never less.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis

from harness_operator.contract.model_access import MeteredUsage
from harness_operator.contract.times import timestamp
from harness_operator.modelgateway.metering import RequestUsage

MAX_CONNECTIONS = 32
METER_TTL_SECONDS = 30 * 24 * 3600  # a meter outlives any attempt the operator still has to read

RESERVE = """
local h, a = KEYS[1], KEYS[2]
redis.call('SET', KEYS[3], ARGV[9], 'NX')
local spent = tonumber(redis.call('HGET', h, 'costUSD') or '0')
local held = tonumber(redis.call('HGET', h, 'reservedUSD') or '0')
local used = tonumber(redis.call('HGET', h, 'tokens') or '0')
local heldTokens = tonumber(redis.call('HGET', h, 'reservedTokens') or '0')
local cap, capTokens = tonumber(ARGV[1]), tonumber(ARGV[2])
local inCost, outPrice, inTokens = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local allow, minOut = tonumber(ARGV[6]), tonumber(ARGV[7])
if cap >= 0 then
  local left = cap - spent - held - inCost
  local n = -1
  if left >= 0 then
    if outPrice > 0 then n = math.floor(left / outPrice) else n = 1000000000 end
  end
  if allow < 0 or n < allow then allow = n end
end
if capTokens >= 0 then
  local n = capTokens - used - heldTokens - inTokens
  if allow < 0 or n < allow then allow = n end
end
if (cap >= 0 or capTokens >= 0) and allow < minOut then
  for _, k in ipairs({h, a}) do
    redis.call('HINCRBY', k, 'refused', 1)
    redis.call('EXPIRE', k, tonumber(ARGV[8]))
  end
  return {0, tostring(spent + held), tostring(used + heldTokens)}
end
local cost, tokens = inCost, inTokens
if allow >= 0 then
  cost = cost + allow * outPrice
  tokens = tokens + allow
end
for _, k in ipairs({h, a}) do
  redis.call('HINCRBYFLOAT', k, 'reservedUSD', cost)
  redis.call('HINCRBY', k, 'reservedTokens', tokens)
  redis.call('EXPIRE', k, tonumber(ARGV[8]))
end
return {1, tostring(allow), tostring(cost), tostring(tokens)}
"""

SETTLE = """
local cost = tonumber(ARGV[3])
local names = {'inputTokens', 'outputTokens', 'cacheReadTokens', 'cacheWriteTokens'}
for _, h in ipairs(KEYS) do
  redis.call('HINCRBYFLOAT', h, 'reservedUSD', -tonumber(ARGV[1]))
  redis.call('HINCRBY', h, 'reservedTokens', -tonumber(ARGV[2]))
  redis.call('HINCRBY', h, 'requests', 1)
  if cost >= 0 then
    redis.call('HINCRBYFLOAT', h, 'costUSD', cost)
  else
    redis.call('HINCRBY', h, 'unpriced', 1)
  end
  local total = 0
  for i, name in ipairs(names) do
    local n = tonumber(ARGV[3 + i])
    redis.call('HINCRBY', h, name, n)
    total = total + n
  end
  redis.call('HINCRBY', h, 'tokens', total)
  redis.call('EXPIRE', h, tonumber(ARGV[8]))
end
return 1
"""

# Since when the store has kept its meters: set by the first write after it started empty (and by every
# readiness check), so a store that lost its data says so, and a meter read from it is not trusted for an
# attempt that started before.
SINCE_KEY = "store:since"
# Float sums of reservations added and taken back leave residues of about 1e-17.
RESIDUE = 1e-9


@dataclass(frozen=True)
class Reservation:
    granted: bool
    output_tokens: int | None  # the clamp (None: the request may produce as much as it asked)
    cost: float
    tokens: int
    spent: float = 0.0  # when refused: the spend and reservations it met


@dataclass(frozen=True)
class MeterKeys:
    """The hashes a request of an attempt writes: its run's (which the caps bind) and its own."""

    run: str
    attempt: str


def run_meter_key(run_uid: str) -> str:
    return f"meter:{run_uid}"


def meter_key(run_uid: str, attempt: str) -> str:
    return f"meter:{run_uid}:{attempt}"


def meter_keys(run_uid: str, attempt: str) -> MeterKeys:
    return MeterKeys(run_meter_key(run_uid), meter_key(run_uid, attempt))


class MeterStore:
    def __init__(self, url: str, password: str | None = None) -> None:
        # A burst of requests waits for one of a bounded set of connections (each is held for one
        # script's call) rather than opening one each and failing past the pool's limit.
        pool = aioredis.BlockingConnectionPool.from_url(
            url, password=password, decode_responses=True, max_connections=MAX_CONNECTIONS, timeout=10
        )
        self.redis = aioredis.Redis(connection_pool=pool)
        self._reserve = self.redis.register_script(RESERVE)
        self._settle = self.redis.register_script(SETTLE)

    async def ping(self) -> bool:
        """Whether the store answers; marks since when it keeps meters, if it does not know yet."""
        await self.redis.set(SINCE_KEY, timestamp(datetime.now(UTC)), nx=True)
        return bool(await self.redis.ping())

    async def reserve(
        self,
        keys: MeterKeys,
        cap_usd: float | None,
        cap_tokens: int | None,
        input_cost: float,
        output_price: float,
        input_tokens: int,
        requested_output: int | None,
        min_output: int,
    ) -> Reservation:
        """Hold the request's worst case in its run's and attempt's meters; the output it may produce
        clamped to what the run's caps leave of its meter."""
        reply = await self._reserve(
            keys=[keys.run, keys.attempt, SINCE_KEY],
            args=[
                -1 if cap_usd is None else repr(cap_usd),
                -1 if cap_tokens is None else cap_tokens,
                repr(input_cost),
                repr(output_price),
                input_tokens,
                -1 if requested_output is None else requested_output,
                min_output,
                METER_TTL_SECONDS,
                timestamp(datetime.now(UTC)),
            ],
        )
        if int(reply[0]) == 0:
            return Reservation(False, None, 0.0, 0, spent=float(reply[1]))
        allowed = int(float(reply[1]))
        return Reservation(True, None if allowed < 0 else allowed, float(reply[2]), int(float(reply[3])))

    async def settle(
        self, keys: MeterKeys, held: Reservation, usage: RequestUsage, cost: float | None
    ) -> None:
        """Give back the worst case held and count what the request really used and cost, in both."""
        await self._settle(
            keys=[keys.run, keys.attempt],
            args=[
                repr(held.cost),
                held.tokens,
                -1 if cost is None else repr(cost),
                *(count or 0 for count in usage.tokens.as_tuple()),
                METER_TTL_SECONDS,
            ],
        )

    async def read(self, key: str) -> MeteredUsage:
        fields, since = await self.redis.hgetall(key), await self.redis.get(SINCE_KEY)
        reserved = float(fields.get("reservedUSD", 0))
        return MeteredUsage(
            requests=int(fields.get("requests", 0)),
            refused=int(fields.get("refused", 0)),
            input_tokens=int(fields.get("inputTokens", 0)),
            output_tokens=int(fields.get("outputTokens", 0)),
            cache_read_tokens=int(fields.get("cacheReadTokens", 0)),
            cache_write_tokens=int(fields.get("cacheWriteTokens", 0)),
            cost_usd=float(fields.get("costUSD", 0)),
            unpriced=int(fields.get("unpriced", 0)),
            reserved_usd=reserved if reserved > RESIDUE else 0.0,
            store_since=since,
        )
