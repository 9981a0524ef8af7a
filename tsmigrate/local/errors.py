"""Service errors: an HTTP status, a Tablestore error code and the service's exact message."""

from __future__ import annotations


class OTSError(Exception):
    """An error answered to the client as `Error{code, message}` with an HTTP status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


ECHO_MAX = 64  # characters of a client's text an error message repeats


def echo(text: str) -> str:
    """A client-supplied name as an error message repeats it: shortened when long (a message
    must not grow with whatever a client sends)."""
    if len(text) <= ECHO_MAX:
        return text
    return f"{text[:ECHO_MAX]}... ({len(text)} characters)"


def invalid(message: str) -> OTSError:
    return OTSError(400, "OTSParameterInvalid", message)


def invalid_pk(message: str) -> OTSError:
    return OTSError(400, "OTSInvalidPK", message)


def auth_failed(message: str) -> OTSError:
    return OTSError(403, "OTSAuthFailed", message)


def table_not_exist() -> OTSError:
    return OTSError(404, "OTSObjectNotExist", "Requested table does not exist.")


def condition_failed() -> OTSError:
    return OTSError(403, "OTSConditionCheckFail", "Condition check failed.")


def server_busy() -> OTSError:
    return OTSError(503, "OTSServerBusy", "Server is busy.")


def not_enough_cu() -> OTSError:
    return OTSError(403, "OTSNotEnoughCapacityUnit", "Remaining capacity unit is not enough.")


def internal_error() -> OTSError:
    return OTSError(500, "OTSInternalServerError", "Internal server error.")
