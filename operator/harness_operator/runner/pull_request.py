"""The run's pull request on the forge, from the publishing container (I/O): the open one from the
run's branch found (a FastForward push onto a pull request's branch), else one opened.

The calls are runner/forges.py's; a redirect is never followed (it would carry the token elsewhere).
"""

from __future__ import annotations

import urllib.error
import urllib.request

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import BODY_OUTPUT_CHARS, PublishPlan, PullRequestPlan
from harness_operator.runner.forges import (
    ForgeRequest,
    PullRequestRef,
    build_find_pull_request,
    build_pull_request,
    read_found_pull_request,
    read_pull_request,
)
from harness_operator.runner.publish_git import PublishError
from harness_operator.runner.redact import Redactor

# Gitea lists open pull requests unfiltered: this many pages of them are read before one is opened.
FIND_PAGES = 20


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed: urllib would send the token on to wherever it points."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def render_template(text: str, output: str) -> str:
    return text.replace("$(output)", output[:BODY_OUTPUT_CHARS])


def _send(request: PullRequestPlan, call: ForgeRequest) -> tuple[int, bytes]:
    """The answer's status and body; an unreachable forge fails the step, naming what to check."""
    req = urllib.request.Request(call.url, data=call.body or None, headers=call.headers, method=call.method)
    try:
        with _OPENER.open(req, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise PublishError(
            Reason.PullRequestFailed,
            f"the forge's API at {request.api_url} cannot be reached ({exc}); check "
            "publish.pullRequest.apiURL and that the run's network policy allows its host",
        ) from None


def find_pull_request(
    request: PullRequestPlan, branch: str, token: str, redactor: Redactor
) -> PullRequestRef | None:
    """The open pull request from `branch` of the repository itself, or None."""
    for page in range(1, FIND_PAGES + 1):
        status, body = _send(request, build_find_pull_request(request, branch, token, page))
        found, more, problem = read_found_pull_request(request, branch, status, body)
        if problem is not None:
            raise PublishError(
                Reason.PullRequestFailed,
                f"the forge refused to list the open pull requests of {request.repository}: "
                f"{redactor.text(problem)}; check publish.pullRequest (repository) and that the token may "
                "read pull requests",
            )
        if found is not None or not more:
            return found
    return None


def open_pull_request(
    plan: PublishPlan, branch: str, base: str, output: str, token: str, redactor: Redactor
) -> PullRequestRef:
    """The pull request from `branch` into `base`, opened; its title and body with the output."""
    request = plan.pull_request
    assert request is not None
    title = render_template(request.title, output.splitlines()[0] if output.strip() else "").strip()
    rendered = request.model_copy(
        update={"title": title[:256] or branch, "body": render_template(request.body, output)}
    )
    status, body = _send(request, build_pull_request(rendered, branch, base, token))
    opened, problem = read_pull_request(request.forge, status, body)
    if opened is None:
        raise PublishError(
            Reason.PullRequestFailed,
            f"the forge refused to open the pull request from {branch} into {base}: "
            f"{redactor.text(problem or '')}; check publish.pullRequest (repository, base) and that the "
            "token may open pull requests",
        )
    return opened
