"""Mail for ``--mail-type`` to ``--mail-user`` (the submitter by default), as slurmctld sends it.

The events: BEGIN (the run starts), END (it ended), FAIL (it ended failed: FAIL wins over END,
one mail), REQUEUE (back to pending), TIME_LIMIT, TIME_LIMIT_90/80/50 (the run reached that
share of its limit), ALL (BEGIN, END, FAIL, REQUEUE), NONE. An array job mails once for the
whole array (its first start, its last end: "Array Summary") unless ARRAY_TASKS asks for
every task.

The message is Slurm's one line, sent as the subject with an empty body: ``Slurm Job_id=7
Name=train Ended, Run time 00:01:02, COMPLETED, ExitCode 0``. It goes out through MailProg
called as slurmctld calls it (``MailProg -s SUBJECT -- USER``: ``--`` so that no recipient is
read as an option, and --mail-user checked as recipients at submit by kiln/slurm/mailuser.py;
the SLURM_JOB_* variables in its environment, stdin and stdout /dev/null), or, with
``[mail] smtp_host`` set, over SMTP. Either way schedd never waits for it: MailProg runs on
its own (reaped later), SMTP in a thread.

Which time-limit notices a run was sent is kept on the job, in the ledger (``Job.mail_sent``,
cleared when a run starts): a schedd that restarts sends none of them again and still sends
those that fall due.
"""

from __future__ import annotations

import email.policy
import logging
import os
import smtplib
import subprocess
import threading
from email.message import EmailMessage

from kiln.config import Config
from kiln.model import Job, JobState
from schedd.state import State

log = logging.getLogger("schedd.mail")

ALL = frozenset({"BEGIN", "END", "FAIL", "REQUEUE"})
KNOWN = ALL | {"NONE", "ALL", "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50",
               "ARRAY_TASKS", "INVALID_DEPEND", "STAGE_OUT"}
FAILED = frozenset({JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL,
                    JobState.OUT_OF_MEMORY, JobState.PREEMPTED})
# TIME_LIMIT_N: the share of the limit, in the order a run reaches them
THRESHOLDS = (("TIME_LIMIT_50", 0.5, "Reached 50% of time limit"),
              ("TIME_LIMIT_80", 0.8, "Reached 80% of time limit"),
              ("TIME_LIMIT_90", 0.9, "Reached 90% of time limit"),
              ("TIME_LIMIT", 1.0, "Reached time limit"))


def sent_notices(job: Job) -> list[str]:
    """The time-limit notices already mailed for the job's current run."""
    return [n for n in job.mail_sent.split(",") if n]


def mail_types(text: str) -> frozenset[str]:
    """'BEGIN,END' -> {'BEGIN', 'END'}; ALL expands; NONE (or nothing) is none."""
    names = {t.strip().upper() for t in (text or "").split(",") if t.strip()}
    if "NONE" in names:
        return frozenset()
    if "ALL" in names:
        names |= ALL
    return frozenset(names)


def run_time(seconds: float) -> str:
    """Slurm's secs2time_str: HH:MM:SS, D-HH:MM:SS past a day."""
    secs = max(int(seconds), 0)
    days, rest = divmod(secs, 86400)
    hours, rest = divmod(rest, 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


class Outbox:
    """Sends the mails of one schedd. The time-limit notices sent for a run are kept on the
    job (``Job.mail_sent``, in the ledger), so they survive a restart of schedd."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._children: list[subprocess.Popen] = []

    # --- the events ----------------------------------------------------------------------

    def began(self, job: Job, siblings: list[Job]) -> None:
        types = mail_types(job.mail_type)
        if "BEGIN" not in types:
            return
        if self._summary(job, types):
            if any(s.start_time and s.id != job.id for s in siblings):
                return  # the array began with an earlier task
            self.send(job, f"Slurm Array Summary Job_id={job.array_job_id}_* "
                           f"({job.array_job_id}) Name={job.name} Began, Queued time "
                           f"{run_time(job.start_time - job.submit_time)}")
            return
        self.send(job, f"{self._head(job)} Began, Queued time "
                       f"{run_time(job.start_time - job.submit_time)}")

    def ended(self, job: Job, state: JobState, requeued: bool, end_time: float,
              siblings: list[Job]) -> None:
        types = mail_types(job.mail_type)
        ran = run_time(end_time - job.start_time) if job.start_time else run_time(0)
        tail = f"Run time {ran}, {state.value}, ExitCode {job.exit_code}"
        if requeued:
            if "REQUEUE" in types:
                self.send(job, f"{self._head(job)} Requeued, {tail}")
            return
        kind = "Failed" if "FAIL" in types and state in FAILED else (
            "Ended" if "END" in types else "")
        if not kind:
            return
        if self._summary(job, types):
            if any(s.state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING)
                   for s in siblings if s.id != job.id):
                return  # the array is not over yet
            self.send(job, f"Slurm Array Summary Job_id={job.array_job_id}_* "
                           f"({job.array_job_id}) Name={job.name} {kind}, {state.value}, "
                           f"ExitCode {job.exit_code}")
            return
        self.send(job, f"{self._head(job)} {kind}, {tail}")

    def tick(self, state: State, now: float) -> None:
        """TIME_LIMIT_50/80/90 and TIME_LIMIT: each once per run; and reap MailProg. What is
        due is committed as sent before it goes out: a crash between the two loses a notice
        rather than sending it twice after the restart."""
        self._children = [c for c in self._children if c.poll() is None]
        due: list[tuple[Job, list[tuple[str, str]]]] = []
        for job in state.running():
            notices = self.notices_due(job, now, state.time_limit(job))
            if notices:
                due.append((job, notices))
        if not due:
            return
        state.commit([(job, {"mail_sent": ",".join(
            [*sent_notices(job), *(name for name, _ in notices)])}) for job, notices in due])
        for job, notices in due:
            for _, words in notices:
                self.send(job, f"{self._head(job)} {words}, Run time "
                               f"{run_time(now - job.start_time)}")

    @staticmethod
    def notices_due(job: Job, now: float, limit: int | None) -> list[tuple[str, str]]:
        """(TIME_LIMIT_x, words) the run has reached and not been sent, in the order reached."""
        types = mail_types(job.mail_type)
        if not limit or not job.start_time or not types & {t for t, _, _ in THRESHOLDS}:
            return []
        sent = sent_notices(job)
        return [(name, words) for name, share, words in THRESHOLDS
                if name in types and name not in sent and now - job.start_time >= share * limit]

    # --- sending -------------------------------------------------------------------------

    @staticmethod
    def _summary(job: Job, types: frozenset[str]) -> bool:
        return job.array_job_id is not None and "ARRAY_TASKS" not in types

    @staticmethod
    def _head(job: Job) -> str:
        if job.array_job_id is not None:
            return (f"Slurm Job_id={job.array_job_id}_{job.array_task_id} ({job.id}) "
                    f"Name={job.name}")
        return f"Slurm Job_id={job.id} Name={job.name}"

    def send(self, job: Job, subject: str) -> None:
        to = job.mail_user or job.user
        if not to:
            return
        mail = self.cfg.mail
        if mail.smtp_host:
            threading.Thread(target=self._smtp, args=(to, subject), daemon=True,
                             name="mail").start()
            return
        try:
            self._children.append(subprocess.Popen(
                [mail.mail_prog, "-s", subject, "--", to], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                start_new_session=True, env=self._environment(job)))
        except OSError as exc:
            log.warning("MailProg %s for job %d: %s", mail.mail_prog, job.id, exc.strerror)

    def _smtp(self, to: str, subject: str) -> None:
        mail = self.cfg.mail
        # one Subject line (RFC 5322 allows 998 characters): no fold before its first word
        msg = EmailMessage(policy=email.policy.SMTP.clone(max_line_length=998))
        domain = f"@{mail.domain}" if mail.domain and "@" not in to else ""
        msg["To"] = to + domain
        msg["From"] = mail.smtp_from or f"slurm@{os.uname().nodename}"
        msg["Subject"] = subject
        msg.set_content("")
        try:
            with smtplib.SMTP(mail.smtp_host, mail.smtp_port, timeout=30) as smtp:
                smtp.send_message(msg)
        except (OSError, smtplib.SMTPException) as exc:
            log.warning("mail to %s over SMTP %s:%d failed: %s", msg["To"], mail.smtp_host,
                        mail.smtp_port, exc)

    def _environment(self, job: Job) -> dict[str, str]:
        """What slurmctld puts in MailProg's environment (slurm.conf(5), MailProg)."""
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
               "SLURM_CLUSTER_NAME": self.cfg.cluster_name, "SLURM_JOB_ID": str(job.id),
               "SLURM_JOB_NAME": job.name, "SLURM_JOB_USER": job.user,
               "SLURM_JOB_UID": str(job.uid), "SLURM_JOB_GROUP": str(job.gid),
               "SLURM_JOB_MAIL_TYPE": job.mail_type, "SLURM_JOB_STATE": job.state.value,
               "SLURM_JOB_NODELIST": job.node_list,
               "SLURM_JOB_EXIT_CODE2": f"{job.exit_code}:{job.exit_signal}",
               "SLURM_JOB_WORK_DIR": job.workdir, "SLURM_JOB_STD_OUT": job.stdout,
               "SLURM_JOB_STD_ERR": job.stderr or job.stdout,
               "SLURM_JOB_STD_IN": job.stdin or "/dev/null"}
        if job.array_job_id is not None:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        return env
