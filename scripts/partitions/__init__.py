"""Partitions (issue 37): writers, the lock service and the object store on separate hosts, cut apart mid-commit.

    python -m scripts.partitions --rounds 50 [--seed 7] [--providers filesystem,zookeeper,s3]   # make partitions
    python -m scripts.partitions --rounds 3 --seed 1                                            # CI-sized

Hosts are Linux network namespaces (root only; a clear error where they cannot be made): a bridge namespace with
`br0`, and one namespace per host joined to it by a veth pair, each with a private address on 10.77.0.0/24 and its
own hostname (a UTS namespace per command), so nothing leaves the machine and no host mistakes another's processes
for its own. The S3 server (Ceph RGW, scripts/rgw.py, inside the `s3` host and reached at 10.77.0.2:80 through a
DNAT rule) and ZooKeeper (the `zk` host, 10.77.0.3:2181) live for the whole run; every round gets new writer
hosts, a new bucket (or local folder) and a new table.

A round: land a few CSV files per stream, start the round's faulted command on writer host w1 with a fault point
armed (the hook below stops the process there with SIGSTOP): `stitch ingest` in half the rounds, else `stitch
compact` or `stitch clean` of a table the `ctl` host gave data first. A third of the faulted ingests are of stream
`c`, which reads a Kafka topic of the round from a broker on host `kafka` (10.77.0.4:9092); the others of landing
stream `a`. A quarter of the ingests and compactions of landing files (`--engine` forces it) run as Spark jobs
(`--engine spark`, spark-submit local[*] on w1): `stitch` takes an ingest's claim and keeps its heartbeat, the job's
driver runs and publishes, so the points are armed in both (the driver's through
scripts/partitions_site/sitecustomize.py) and a Spark round's point is `begin`, `heartbeat` or `publish`. Half the
Spark ingest rounds (`--stream`: every round) fault a long-running `stitch stream` instead: its driver runs each
micro-batch's ingest (a new micro-batch every second; its point `begin` or `publish`, which its first micro-batch
always reaches), and it is asked to stop with SIGTERM a few seconds after the round healed; the checker holds each
micro-batch it said committed (its progress lines, its answer) as an acknowledged write. Inject the round's fault
while it is stopped, resume it, run contenders on w2 (the same stream) and w3 (another stream, then `stitch
compact`) (under a link fault, w2 once `stitch status` shows w1's lease run out, or at the hold's end if it does
not, and the fault then holds TAKEOVER_HOLD_S more), heal HOLD_S after the fault at the earliest, then from the
`ctl` host: `stitch clean` once heartbeats expired, re-run the ingests until nothing is left ("retried" writes),
compact, and check.

Faults (iptables in the writer's namespace): cut from S3, from ZooKeeper, from both, from the Kafka broker;
asymmetric (packets to S3 larger than 1000 bytes dropped: requests and small writes pass, uploads of data files do
not); loss (an iptables `statistic` rule, 30 %) and delay on the writer's link (`eth0`, both ways: this kernel has
no netem, so an NFQUEUE rule hands each packet to delayer.py, which lets it through DELAY_S later); a pause
(SIGSTOP) while a contender takes over (a zombie: the contenders start once `stitch status` shows the stopped
writer's instant or compaction plan expired, and the writer stays stopped until the round lets it go, whatever else
may wake it); a clock ahead or behind (libfaketime `FAKETIME`); ZooKeeper, RGW or the Kafka broker killed and
restarted while the writer is stopped at its point. A Spark job or a Kafka ingest is never the skewed one:
libfaketime breaks the timed waits of CPython and of the JVM (a Kafka client's wait never returns; with
DONT_FAKE_MONOTONIC `time.sleep` fails). A seed replays its rounds with the same version of this script (the draws
depend on its lists). Points: `begin` (requested instant written, lock held), `mark` (a marker written), `write` (a
data file about to be written), `publish` (about to write the completed instant, lock held), `heartbeat` (about to
renew its beat).

The checker knows the table only through the CLI a client has (`stitch timeline show`, `stitch read`): the
operation history is every command with its exit code and JSON answer. After healing it checks that every
acknowledged write (exit 0 with an instant) is completed in the timeline with its rows, and so is every instant
an acknowledged compaction or clean reported; that completed deltacommits nobody acknowledged are no more than the
writes whose outcome the client could not know (exit 1, killed); that each landing file's rows and each Kafka
batch's records are in the table exactly once (per stream, the rows of completed deltacommits add up to the rows
landed, and the snapshot holds exactly the landed keys and values); that no two completed deltacommits of one
stream overlap in time (two holders of one stream's claim); and that the snapshot, the read-optimized view after
compaction, time travel to the last instant and the change feed agree (after a clean, the feed from the `since`
its refusal names). A violation prints the history. The exit code is 1 on any violation.
"""

from scripts.partitions.checker import check, check_feed, history
from scripts.partitions.hook import install_hook
from scripts.partitions.hosts import Network, PartitionsError
from scripts.partitions.rounds import expected_rows, play_round, stopped_at_point
from scripts.partitions.run import Run
from scripts.partitions.settings import KAFKA_STREAM, POINTS, PROVIDERS, SPARK_POINTS

__all__ = [
    "KAFKA_STREAM",
    "POINTS",
    "PROVIDERS",
    "SPARK_POINTS",
    "Network",
    "PartitionsError",
    "Run",
    "check",
    "check_feed",
    "expected_rows",
    "history",
    "install_hook",
    "play_round",
    "stopped_at_point",
]
