"""``--mail-user``: who gets a job's mail, checked as a recipient before it is stored.

The value reaches MailProg's command line (``MailProg -s SUBJECT -- USER``) or an SMTP ``To:``
header, so it must be a recipient and nothing else: a user name or ``local@domain``, several
separated by commas. A leading ``-`` (``-x@y`` would be read by mail(1) as an option), blanks,
quotes, angle brackets and shell or header metacharacters are refused. Standard library only;
no regular expression (``re`` costs every command a few ms to import).
"""

from __future__ import annotations

MAX_LENGTH = 254  # RFC 5321's limit on a forward path, for the whole list
MAX_RECIPIENTS = 16
_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_LABEL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def _recipient(text: str) -> bool:
    local, at, domain = text.partition("@")
    if not local or local[0] in "-." or not _LOCAL.issuperset(local):
        return False
    if not at:
        return True  # a user name: the mail system's local delivery (or MailDomain) resolves it
    labels = domain.split(".")
    return all(label and label[0] != "-" and label[-1] != "-" and _LABEL.issuperset(label)
               for label in labels)


def problem(value: str) -> str | None:
    """Why ``value`` is not a recipient list, or None when it is ("" is: the submitter)."""
    if not value:
        return None
    if len(value) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters"
    names = value.split(",")
    if len(names) > MAX_RECIPIENTS:
        return f"more than {MAX_RECIPIENTS} recipients"
    for name in names:
        if not _recipient(name):
            return f"{name!r} is not a user name or mail address"
    return None
