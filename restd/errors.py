"""Slurm's errors: ``{"errors": [{"description", "error_number", "error", "source"}]}``, with
slurm_errno.h's numbers and slurm_strerror's words, and the HTTP status slurmrestd gives each
(src/slurmrestd/operations.c: a bad query 422, an unparsable body 400, an unknown job 404)."""

from __future__ import annotations

from kiln.wire import protocol

SLURM_ERROR = -1
SLURM_COMMUNICATIONS_CONNECTION_ERROR = 1001
SLURM_PROTOCOL_AUTHENTICATION_ERROR = 1007
ESLURM_INVALID_PARTITION_NAME = 2000
ESLURM_ACCESS_DENIED = 2002
ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_ALREADY_DONE = 2021
ESLURM_INVALID_ACCOUNT = 2045
ESLURM_AUTH_CRED_INVALID = 6000
ESLURM_REST_INVALID_QUERY = 9000
ESLURM_REST_FAIL_PARSING = 9001
ESLURM_REST_INVALID_JOBS_DESC = 9002
ESLURM_REST_EMPTY_RESULT = 9003
ESLURM_REST_UNKNOWN_URL = 9006

STRERROR = {
    SLURM_ERROR: "Unspecified error",
    SLURM_COMMUNICATIONS_CONNECTION_ERROR: "Communication connection failure",
    SLURM_PROTOCOL_AUTHENTICATION_ERROR: "Protocol authentication error",
    ESLURM_INVALID_PARTITION_NAME: "Invalid partition name specified",
    ESLURM_ACCESS_DENIED: "Access/permission denied",
    ESLURM_INVALID_JOB_ID: "Invalid job id specified",
    ESLURM_INVALID_NODE_NAME: "Invalid node name specified",
    ESLURM_ALREADY_DONE: "Job/step already completing or completed",
    ESLURM_INVALID_ACCOUNT: "Invalid account or account/partition combination specified",
    ESLURM_AUTH_CRED_INVALID: "Invalid authentication credential",
    ESLURM_REST_INVALID_QUERY: "Query empty or not RFC7320 compliant",
    ESLURM_REST_FAIL_PARSING: "Failure during parsing",
    ESLURM_REST_INVALID_JOBS_DESC: "Jobs description entry not found, empty or not "
                                   "dictionary or list",
    ESLURM_REST_EMPTY_RESULT: "Nothing found with query",
    ESLURM_REST_UNKNOWN_URL: "Unable to find requested URL endpoint",
}

HTTP_STATUS = {
    ESLURM_REST_INVALID_QUERY: 422, ESLURM_REST_FAIL_PARSING: 400,
    ESLURM_REST_INVALID_JOBS_DESC: 400, ESLURM_INVALID_JOB_ID: 404,
    ESLURM_REST_UNKNOWN_URL: 404, SLURM_COMMUNICATIONS_CONNECTION_ERROR: 502,
    SLURM_PROTOCOL_AUTHENTICATION_ERROR: 401, ESLURM_AUTH_CRED_INVALID: 401,
    ESLURM_ACCESS_DENIED: 403,
}

# schedd's messages (Slurm's own words) -> their numbers
_BY_MESSAGE = {text: number for number, text in STRERROR.items() if number > 0}
_BY_MESSAGE["Access/permission denied"] = ESLURM_ACCESS_DENIED
_BY_MESSAGE["Invalid job id specified"] = ESLURM_INVALID_JOB_ID
_BY_MESSAGE["Job/step already completing or completed"] = ESLURM_ALREADY_DONE


class RestError(Exception):
    """A request ends with this error (its number, description, where it was seen)."""

    def __init__(self, number: int, description: str, source: str = "", status: int = 0):
        super().__init__(description)
        self.number, self.description, self.source = number, description, source
        self.status = status or HTTP_STATUS.get(number, 500)

    def entry(self) -> dict[str, object]:
        return error_entry(self.number, self.description, self.source)


def error_entry(number: int, description: str, source: str = "") -> dict[str, object]:
    return {"description": description, "error_number": number,
            "error": STRERROR.get(number, STRERROR[SLURM_ERROR]), "source": source}


def from_schedd(code: str, message: str, source: str) -> RestError:
    """schedd's refusal as Slurm's error: a caller's mistake is 4xx, not slurmrestd's 500."""
    number = _BY_MESSAGE.get(message.split(": ")[-1].strip(), SLURM_ERROR)
    if code == protocol.E_AUTH:
        return RestError(ESLURM_AUTH_CRED_INVALID, message, source, 401)
    if code == protocol.E_PERMISSION:
        return RestError(ESLURM_ACCESS_DENIED, message, source, 403)
    if code == protocol.E_INVALID_JOB:
        return RestError(ESLURM_INVALID_JOB_ID, message, source, 404)
    if code == "unreachable":
        return RestError(SLURM_COMMUNICATIONS_CONNECTION_ERROR, message, source, 502)
    if code == protocol.E_AGAIN:
        return RestError(number, message, source, 503)
    if code in (protocol.E_INVALID, protocol.E_BAD_REQUEST):
        return RestError(number, message, source, 404 if number == ESLURM_INVALID_JOB_ID
                         else 400)
    return RestError(number, message, source, 500)
