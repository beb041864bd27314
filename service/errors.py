"""The service's error hierarchy: every exception class of service/ and workers/, and its HTTP status.

Errors a caller sees (defined here; ``status`` and ``code`` pick the response):

    AgentSearchError                    500  internal   (never raised on purpose for input)
    ├── BadRequest                      400  bad_request
    │   ├── InvalidJSON                 400  invalid_json
    │   ├── ValidationError             400  validation_error   (wrong type, unknown field, range)
    │   ├── InvalidEntityRef            400  invalid_entity
    │   ├── UnknownDomain               400  unknown_domain
    │   ├── InvalidRegex                400  invalid_regex
    │   └── PathOutsideWorkspace        400  path_outside_workspace
    ├── Unauthorized                    401  unauthorized
    ├── Forbidden                       403  forbidden
    ├── NotFound                        404  not_found
    │   └── FragmentNotFound            404  fragment_not_found  (entity heading/line/file fragment)
    ├── Conflict                        409  conflict
    │   ├── WorkspaceMissing            409  workspace_missing  (its root was deleted or replaced by a file)
    │   └── WorkspaceBroken             409  workspace_broken   (its cache cannot be opened; delete it)
    ├── PayloadTooLarge                 413  payload_too_large
    ├── RateLimited                     429  rate_limited
    ├── DeadlineExceeded                504  deadline_exceeded
    └── Unavailable                     503  unavailable        (a dependency is down)
        └── InsufficientStorage         507  insufficient_storage (the data volume is full; the write was refused)

Every error renders as ``{"error": {"code": ..., "message": ...}}`` plus optional ``details``.
Messages say what to fix; they never name another tenant's data.

Internal errors: never reach a caller as themselves; the module that catches each one is named.
Those any layer raises or catches are defined here; those private to one module stay there.

    SettingsError                         a setting is missing or invalid: the CLI prints it, exits 2
    EmbeddingUnavailable                  the embeddings model failed or timed out: each surface's
    │                                     search answers lexically with a notice; workers.jobs retries;
    │                                     a worker starts without the model; ``agentsearch reindex``
    │                                     exits 2
    └── EmbeddingsDisabled                no model is configured: workers.jobs leaves records pending
    service.engine.store.StoreError       the store failed (the store package imports no service
    │                                     module): surfaces fall back to lexical results, health
    │                                     reports the store down, workers retry, the CLI exits 2;
    │                                     elsewhere 500 internal
    ├── StoreFullError                    the data volume is full: middleware answers 507
    │                                     InsufficientStorage
    └── StoreLockedError                  another process holds the index directory: the CLI exits 2;
                                          service.reindex_command hands the reindex to the running service
    service.engine.store.edge_build.BuildFailed  the child process could not build a collection's
                                          HNSW index: EdgeStore raises it as StoreError to an explicit
                                          ``build_index``; a background build logs it and retries later
    service.engine.onnx_encoder.OnnxUnavailable  the ONNX export cannot serve (export failed, file
    │                                     unloadable, a probe disagrees with torch):
    │                                     service.engine.embeddings keeps torch, one warning in the log
    └── OnnxStopped                       the process is shutting down during the preparation: the
                                          embedder stops it quietly
    service.engine.reindex.ReindexNotFinished   the reindex slice ran out of time: workers.jobs
                                          retries the job at once
    service.catalog.scorers.ScorerError   the rerank scorer failed or cannot load: catalog search
                                          keeps hybrid order (rerank fallback-error)
    service.engine.deadline.SearchAbandoned  the search deadline passed (or the request gave up)
                                          between phases: service.engine.surface answers the
                                          surface's past-deadline answer (504 DeadlineExceeded when
                                          it has none; the catalog's, service.catalog.search, is an
                                          isError answer with status 200)
    TimeoutError (the built-in)           a dependency's own timeout, not caught by the code that
                                          called it: service.middleware answers 503 Unavailable (the
                                          request deadline's own expiry answers 504, and so does an
                                          answer that comes back past it)
    service.code.scope.ScopeError         a path or glob leaves the workspace: code search answers
    │                                     400 PathOutsideWorkspace
    └── ScopeNotFound                     the path does not exist: code search answers 404 NotFound
    service.code.semantic.IndexNotComplete  a workspace index is not finished: service.code.jobs
                                          retries the job in a second
    service.code.trigram.IndexLocked      another writer holds the trigram index: code search
                                          answers from the index as it is, with a notice
    service.code.inotify.WatchError       a workspace root cannot be watched, or its watch ended (the
                                          root gone, the watch limit, the event queue overflowed):
                                          service.code.watcher reports the watch lost, and the
                                          workspace is revalidated by mtime on search
    service.code.matchers._ProtocolError  a regex matching process answered outside its protocol:
                                          the pool kills the process; the regex search answers the
                                          matches so far with a notice
    service.code.cli_service.NotServed    the running service cannot take a command-line search (no
                                          token, the root not under its allowed bases): ``agentsearch
                                          search`` searches in its own process (exits 2 when ``--url``
                                          named the service)
    service.code.cli_service.ServiceRefused  a BadRequest: the running service answered the
                                          command-line search with an error; ``agentsearch search``
                                          prints its message and exits 2
    service.mcp.jsonrpc.RpcError          a JSON-RPC error: MCP answers it as a JSON-RPC error object
                                          (over HTTP with its ``http_status``); AgentSearchError
                                          becomes one through ``rpc_error_of``
    service.mcp.backends.ToolError        the remote service refused a tool call or is unreachable:
                                          service.mcp.server answers a tool result with isError
    service.evaluation.EvaluationError    a bad qrels line, a refused token or an unreachable service:
                                          ``agentsearch eval`` prints it and exits 2
    service.evaluation.QueryFailed        one evaluated search was refused or failed: the evaluation
                                          counts it and its report names the first one's error
    workers.settings.ForeignJob           a job queued by another deployment, on its last try: the
                                          arq job ends failed
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class AgentSearchError(Exception):
    """Base of every error the service answers with; ``status`` and ``code`` pick the response."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"

    def __init__(
        self,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return {"error": error}


class BadRequest(AgentSearchError):
    status = 400
    code = "bad_request"


class InvalidJSON(BadRequest):
    code = "invalid_json"


class ValidationError(BadRequest):
    code = "validation_error"


class InvalidEntityRef(BadRequest):
    code = "invalid_entity"


class UnknownDomain(BadRequest):
    code = "unknown_domain"


class InvalidRegex(BadRequest):
    code = "invalid_regex"


class PathOutsideWorkspace(BadRequest):
    code = "path_outside_workspace"


class Unauthorized(AgentSearchError):
    status = 401
    code = "unauthorized"


class Forbidden(AgentSearchError):
    status = 403
    code = "forbidden"


class NotFound(AgentSearchError):
    status = 404
    code = "not_found"


class FragmentNotFound(NotFound):
    """An entity exists but the heading, line or file named after its ``#`` does not."""

    code = "fragment_not_found"


class Conflict(AgentSearchError):
    status = 409
    code = "conflict"


class WorkspaceMissing(Conflict):
    code = "workspace_missing"


class WorkspaceBroken(Conflict):
    code = "workspace_broken"


class PayloadTooLarge(AgentSearchError):
    status = 413
    code = "payload_too_large"


class RateLimited(AgentSearchError):
    status = 429
    code = "rate_limited"


class DeadlineExceeded(AgentSearchError):
    status = 504
    code = "deadline_exceeded"


class Unavailable(AgentSearchError):
    status = 503
    code = "unavailable"


class InsufficientStorage(Unavailable):
    status = 507
    code = "insufficient_storage"


class SettingsError(Exception):
    """A setting is missing or invalid; raised at start, the message names the setting."""


class EmbeddingUnavailable(Exception):
    """The model is absent, failed or timed out; the message is shown in the search notice."""


class EmbeddingsDisabled(EmbeddingUnavailable):
    """No embeddings model is configured (``none``): not transient, so nothing retries it."""
