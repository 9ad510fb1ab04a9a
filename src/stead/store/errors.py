"""Store errors. The API turns them into the error envelope in ``api/errors.py`` only.

StoreError
├── NotFound        no such row in this workspace (other workspaces look the same)
├── InvalidValue    a value the store's own reads could not render; nothing was written
├── Conflict        the row exists but its state forbids the change
│   ├── SandboxLeaseEnded  the sandbox's lease ended for good; it is not revived
│   ├── BudgetReached  a gated run write found the session's budget reached
│   ├── LimitReached   a workspace or environment limit (``limits.py``) stops it
│   └── StorageQuotaExceeded  a file would take the workspace past its storage quota (400)
├── StaleSecretKey  a secret sealed under a key that is not the database's kept key
├── StoreUnavailable  the database cannot be opened (start-up only; one line to print)
├── DatabaseBusy    a call got no answer now (connection lost, none free in time,
│                   a lock not granted in time): retrying later may succeed
└── ChannelDown     a notice could not be sent between processes (``channel.py``)
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class NotFound(StoreError):
    def __init__(self, kind: str, ident: str, field: str | None = None) -> None:
        self.kind = kind
        self.ident = ident
        self.field = field
        where = f"{field}: " if field else ""
        super().__init__(f"{where}no {kind} with id {ident!r}")


class InvalidValue(StoreError):
    """A JSON value the store refused to write (see ``stead.jsonvalues``): a
    non-finite number or an unpaired surrogate. The transaction was rolled back."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class Conflict(StoreError):
    """A deterministic state conflict; retrying the same request cannot succeed.

    ``status`` is the HTTP status the API should answer with (409 by default,
    400 where the hosted API documents a 400 for the same condition); ``details``
    go into ``error.details`` beside ``code`` (``conflicting_memory_id``, say).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int = 409,
        details: dict[str, str] | None = None,
    ) -> None:
        self.code = code
        self.status = status
        self.details = details
        super().__init__(message)


class SandboxLeaseEnded(Conflict):
    """Acquire refused: the sandbox's session was terminated, archived or deleted, or its
    environment archived or deleted. ``reason`` is a ``LeaseExpiry`` value."""

    def __init__(self, sandbox_id: str, reason: str) -> None:
        self.sandbox_id = sandbox_id
        self.reason = reason
        super().__init__(
            f"sandbox {sandbox_id}: its lease has ended ({reason}); it cannot be acquired again",
            code="sandbox_lease_ended",
        )


class BudgetReached(Conflict):
    """A run write with ``budget_gate`` found the session's budget reached (or an
    unpriced model run under it); nothing was written."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} reached its budget", code="budget_reached")


class LeaseLost(BaseException):
    """A write on behalf of run ``run_id`` at ``epoch`` was refused: the run moved on."""

    def __init__(self, run_id: str, epoch: int) -> None:
        self.run_id = run_id
        self.epoch = epoch
        super().__init__(f"run {run_id} is no longer at epoch {epoch}")


class StaleSecretKey(StoreError):
    """A write would store a secret sealed under key ``sealed_under``, but the
    database's secrets are sealed under key ``kept`` (``stead.vault.kept_key``):
    the process holds a key from before a rotation, or another installation's.
    Nothing was written. The message names both keys' ids, never a secret."""

    def __init__(self, sealed_under: bytes, kept: bytes) -> None:
        self.sealed_under = sealed_under
        self.kept = kept
        super().__init__(
            f"this process seals secrets under key {sealed_under.hex()}, but the database's "
            f"secrets are sealed under key {kept.hex()} (`stead secrets rotate-key` moved "
            "it): restart the process with the database's key (STEAD_SECRET_KEY)"
        )


class StoreUnavailable(StoreError):
    """The database cannot be opened: an unsupported or wrong URL, a server that
    does not answer, or a schema migrated by a newer stead. The message is one
    line for the operator and names no password."""


class DatabaseBusy(StoreError):
    """One call could not be served now: the database went away or restarts, no
    connection came free in time, or a lock was not granted in time. Its
    transaction was rolled back or never began (a commit whose answer was lost
    may have landed); the API answers a retryable 503. The message is the
    driver's first line, for the log: it names no password."""


class ChannelDown(StoreError):
    """A notice could not be sent to the other processes (the database did not
    answer in time). Nothing durable is lost: readers heal by polling."""


class LimitReached(Conflict):
    """A workspace or environment limit stops a model request or a sandbox;
    ``limit`` names it and the message says what was used."""

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)


class StorageQuotaExceeded(Conflict):
    """A new file would take its workspace's stored bytes past the quota; nothing
    was stored. A 400 ``storage_quota_exceeded``, as the hosted API answers."""

    def __init__(self, quota: int, used: int, size: int) -> None:
        self.quota = quota
        self.used = used
        self.size = size
        super().__init__(
            f"file: {size} bytes would take the workspace past its file storage quota of"
            f" {quota} bytes ({used} bytes are stored; the quota is the workspace limit"
            " file_storage_bytes, else STEAD_FILES_QUOTA_BYTES)",
            code="storage_quota_exceeded",
            status=400,
        )
