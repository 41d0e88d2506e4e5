"""The oracle: every read, the final table and the timeline checked against an independent reference merge."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scripts import child_env, demo_data
from scripts.torture.common import (
    CONFIG_NAME,
    HORIZONS_LOG,
    OBSERVED_LOG,
    STREAMS,
    ZOMBIE_REFUSED,
    load_settings,
    open_torture_table,
    read_lines,
    staged_files,
    stitch,
    table_dir,
)
from scripts.torture.erasures import Drops, archived_times, drop_key, dropped, erase_keys, erases_of
from scripts.torture.tablefiles import (
    DATA_ACTIONS,
    CheckpointState,
    Seen,
    TableFiles,
    archived_entries,
    instant_meta,
    list_timeline,
    plan_of,
    read_checkpoint,
    sources_of,
    undone_by,
)

# ================================================================================================ checks


def _from_text_dates(values: pd.Series) -> np.ndarray:
    return (pd.to_datetime(values, format="%Y-%m-%d").astype("int64") // 86_400_000_000_000).to_numpy()


def _from_text_stamps(values: pd.Series) -> np.ndarray:
    return (pd.to_datetime(values, utc=True, format="ISO8601").astype("int64") // 1000).to_numpy()


def load_events(path: Path, stream: str) -> pd.DataFrame:
    """One landing file's events as the ground truth wants them: dates in days, times in µs since the epoch."""
    if stream == "orders":
        table = pq.read_table(path)
        frame = table.drop_columns(["order_date", "order_ts"]).to_pandas()
        frame["order_date"] = table.column("order_date").cast(pa.int32()).to_numpy().astype(np.int64)
        frame["order_ts"] = table.column("order_ts").cast(pa.int64()).to_numpy()
        return frame
    if stream == "payments":
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        columns = ["order_id", "order_date", "pay_status", "paid_amount", "pay_ts"]
        frame = pd.DataFrame(records, columns=columns)
        frame["paid_amount"] = frame["paid_amount"].astype("float64")
        frame["pay_status"] = frame["pay_status"].astype(object)
        frame["order_id"] = frame["order_id"].astype("int64")
    else:
        frame = pd.read_csv(path, dtype={"order_id": "int64"}, keep_default_na=False, na_values=[""])
        for name in ("carrier", "ship_status"):
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    ordering = demo_data.ORDERING[stream]
    frame["order_date"] = _from_text_dates(frame["order_date"].astype(str))
    frame[ordering] = _from_text_stamps(frame[ordering].astype(str))
    return frame


class Reference:
    """Expected tables for sets of consumed landing files, from demo_data's pandas ground truth."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.events: dict[str, dict[str, pd.DataFrame]] = {}
        for stream in STREAMS:
            frames: dict[str, pd.DataFrame] = {}
            position = 0
            for path in staged_files(work, stream):  # sorted name = arrival order, as in the generator
                frame = load_events(path, stream)
                frame["pos"] = np.arange(position, position + len(frame), dtype=np.int64)
                position += len(frame)
                frames[path.name] = frame
            self.events[stream] = frames
        self.cache: dict[str, pa.Table] = {}

    def expected(self, consumed: dict[str, list[str]], drops: Drops | None = None) -> pa.Table:
        """The merge of the consumed files' events, less those of keys an erase took from a file (`drops`)."""
        drops = drops or {}
        key = json.dumps({s: sorted(consumed.get(s, [])) for s in STREAMS}) + repr(drop_key(drops))
        if key not in self.cache:
            parts = []
            for stream in STREAMS:
                frames = self.events[stream]
                empty = next(iter(frames.values())).iloc[0:0]
                gone = drops.get(stream, {})
                chosen = [
                    frames[name][~frames[name]["order_id"].isin(gone[name])] if name in gone else frames[name]
                    for name in sorted(consumed.get(stream, []))
                ]
                parts.append(pd.concat(chosen, ignore_index=True) if chosen else empty)
            self.cache[key] = demo_data.ground_truth(*parts)
        return self.cache[key]


def table_differences(actual: pa.Table, expected: pa.Table, work: Path) -> list[str]:
    """Why `actual` is not `expected` (demo_data.compare's cell-by-cell report); empty when equal."""
    digest = hashlib.sha1(expected.to_pandas().to_json().encode()).hexdigest()[:16]
    path = work / "expected" / f"{digest}.parquet"
    if not path.exists():
        pq.write_table(expected, path)
    problems = demo_data.compare(actual, path)
    if not problems and actual.num_rows != expected.num_rows:
        problems.append(f"{actual.num_rows} rows, expected {expected.num_rows}")
    return problems


@dataclass
class Report:
    reads_checked: int = 0
    reads_skipped: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class History:
    """The final timeline, archive and checkpoint as their files say, and which instants were undone."""

    table: TableFiles
    active: dict[str, Seen]
    active_meta: dict[str, dict[str, Any]]
    pending: list[tuple[str, str, str]]
    archived: dict[str, tuple[Seen, dict[str, Any], str]]
    checkpoint: CheckpointState | None
    #: requested -> the rollback or restore (completed, or pending with its plan) that names it undone.
    undone: dict[str, str]

    @classmethod
    def load(cls, table: TableFiles) -> History:
        completed, pending = list_timeline(table)
        active = {s.requested: s for s in completed}
        metas = {s.requested: instant_meta(table, s) for s in completed}
        archived = archived_entries(table)
        undone: dict[str, str] = {}
        for seen, meta in [*((active[r], m) for r, m in metas.items()), *((s, m) for s, m, _b in archived.values())]:
            if seen.action in ("rollback", "restore"):
                undone.update(dict.fromkeys(undone_by(meta), str(seen)))
        for requested, action, state in pending:
            if action in ("rollback", "restore"):
                undone.update(
                    dict.fromkeys(undone_by(plan_of(table, requested, action)), f"{action} {requested} ({state})")
                )
        return cls(table, active, metas, pending, archived, read_checkpoint(table), undone)

    @property
    def horizon(self) -> str:
        return self.checkpoint.horizon if self.checkpoint else ""

    def meta(self, requested: str) -> dict[str, Any]:
        if requested in self.active_meta:
            return self.active_meta[requested]
        return self.archived[requested][1] if requested in self.archived else {}

    def live(self) -> dict[str, Seen]:
        """Completed instants on the active timeline or in the archive that nothing undid."""
        found = {r: entry[0] for r, entry in self.archived.items()}
        found.update(self.active)
        return {r: s for r, s in found.items() if r not in self.undone}

    def live_deltacommits(self) -> list[tuple[Seen, dict[str, Any]]]:
        chosen = [s for s in self.live().values() if s.action == "deltacommit"]
        return [(s, self.meta(s.requested)) for s in sorted(chosen, key=lambda s: s.completed)]

    def consumed(self) -> dict[str, list[str]]:
        """Landing files the live deltacommits consumed, per stream (a name twice means ingested twice)."""
        out: dict[str, list[str]] = {s: [] for s in STREAMS}
        for _seen, meta in self.live_deltacommits():
            out.setdefault(str(meta.get("stream")), []).extend(sources_of(meta))
        return out

    def consumed_at(self) -> list[tuple[str, str, str]]:
        """(stream, landing file, when its live deltacommit completed)."""
        return [
            (str(meta.get("stream")), name, seen.completed)
            for seen, meta in self.live_deltacommits()
            for name in sources_of(meta)
        ]


@dataclass
class Observations:
    """What the supervisor, the readers and the archivers saw while the run went on."""

    #: instant -> when it was first seen completed (epoch seconds) and by whom.
    instants: dict[Seen, tuple[float, str]] = field(default_factory=dict)
    #: (t0, t1, horizon or "", who): the effective checkpoint horizon somewhere in [t0, t1].
    horizons: list[tuple[float, float, str, str]] = field(default_factory=list)
    #: Savepoints the restorer set out to delete (they may vanish with no instant naming them).
    deleted_savepoints: set[str] = field(default_factory=set)

    def saw(self, key: list[str], t: float, who: str) -> None:
        seen = Seen(*key)
        if seen not in self.instants or t < self.instants[seen][0]:
            self.instants[seen] = (t, who)

    @classmethod
    def load(cls, work: Path) -> Observations:
        found = cls()
        for record in read_lines(work / "logs" / OBSERVED_LOG):
            for key in record.get("instants", []):
                found.saw(key, record["t1"], "supervisor")
        for record in read_lines(work / "logs" / HORIZONS_LOG):
            found.horizons.append((record["t0"], record["t1"], record.get("horizon") or "", "supervisor"))
        for path in sorted((work / "logs").glob("*.jsonl")):
            if path.name in (OBSERVED_LOG, HORIZONS_LOG):
                continue
            for record in read_lines(path):
                who = f"{record.get('role')} (pid {record.get('pid')})"
                if record.get("event") == "horizon":
                    found.horizons.append((record["t0"], record["t1"], record.get("horizon") or "", who))
                elif record.get("event") == "savepoint_delete":
                    found.deleted_savepoints.add(str(record.get("instant")))
        for path in sorted((work / "reads").glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            for key in record.get("snapshot", []):
                found.saw(key, record.get("t1", 0.0), f"read {record['name']}")
        return found

    def latest_horizon(self) -> str:
        return max((h for _t0, _t1, h, _who in self.horizons), default="")


def check_history(work: Path, history: History, seen: Observations, report: Report) -> None:
    """The timeline and the checkpoint never lose an instant, and the horizon never moves backwards."""
    horizon = history.horizon

    def excused(instant: Seen) -> bool:
        """Undone by a rollback or restore that names it, or a savepoint the restorer set out to delete."""
        deleted = instant.action == "savepoint" and instant.requested in seen.deleted_savepoints
        return instant.requested in history.undone or deleted

    for instant, (when, who) in sorted(seen.instants.items(), key=lambda item: item[1][0]):
        first = f"seen completed at {time.strftime('%H:%M:%S', time.localtime(when))} by {who}"
        now = history.active.get(instant.requested)
        archived = history.archived.get(instant.requested)
        if now is not None:
            if now != instant:
                report.violations.append(f"{instant}, {first}, is on the final timeline as {now}")
        elif archived is not None:
            if archived[0] != instant:
                report.violations.append(f"{instant}, {first}, is archived as {archived[0]}")
        elif not excused(instant):
            report.violations.append(
                f"{instant}, {first}, vanished: it is neither on the active timeline nor archived, and no "
                f"rollback or restore names it (archive horizon {horizon or '-'})"
            )
    for requested, (instant, _meta, batch) in sorted(history.archived.items()):
        if requested in history.active or requested in history.undone or instant.completed <= horizon:
            continue
        report.violations.append(
            f"{instant} is archived (in {batch}) beyond the checkpoint horizon {horizon or '-'} and is not on the "
            "active timeline: the view no longer sees it (lost)"
        )
    if history.checkpoint is not None:
        covered: dict[str, set[str]] = {s: set() for s in STREAMS}
        for instant, meta in history.live_deltacommits():
            if instant.completed <= horizon:
                covered.setdefault(str(meta.get("stream")), set()).update(sources_of(meta))
        for stream in STREAMS:
            says = set(history.checkpoint.consumed.get(stream, []))
            if says != covered[stream]:
                report.violations.append(
                    f"checkpoint at {horizon}: stream {stream} consumed {len(says)} landing file(s), but the live "
                    f"instants it covers consumed {len(covered[stream])}: it lacks "
                    f"{sorted(covered[stream] - says)[:5]}, and has {sorted(says - covered[stream])[:5]} extra"
                )
    check_horizons([*seen.horizons, (float("inf"), float("inf"), horizon, "the final checkpoint")], report)


def check_horizons(observed: list[tuple[float, float, str, str]], report: Report) -> None:
    """An observation that began after another ended must not see an older horizon."""
    by_end = sorted(observed, key=lambda o: o[1])
    best: tuple[float, float, str, str] | None = None
    index = 0
    shown: set[tuple[str, str]] = set()
    for observation in sorted(observed, key=lambda o: o[0]):
        while index < len(by_end) and by_end[index][1] < observation[0]:
            if best is None or by_end[index][2] > best[2]:
                best = by_end[index]
            index += 1
        if best is not None and observation[2] < best[2] and (best[2], observation[2]) not in shown:
            shown.add((best[2], observation[2]))
            when = "at the end" if observation[0] == float("inf") else f"at {observation[0]:.3f}"
            report.violations.append(
                f"the archive checkpoint horizon moved backwards: {best[3]} saw {best[2]} (by {best[1]:.3f}), "
                f"then {observation[3]} saw {observation[2] or 'no checkpoint'} {when}"
            )


def cleaned_files(work: Path, history: History, seen: Observations, retain: int) -> dict[str, str | None]:
    """Path -> the retention start of the clean that deleted it (None: that clean should have kept it).

    A clean plans under the lock at its requested time; with keep_latest_commits it may only delete files no
    read as of the `retain`-th latest data commit completed by then (or later) needs. Data commits a restore
    undid later still counted then, so they count here too.
    """
    data = {s.completed for s in history.live().values() if s.action in DATA_ACTIONS}
    data |= {s.completed for s in seen.instants if s.action in DATA_ACTIONS}
    ordered = sorted(data)
    out: dict[str, str | None] = {}
    for instant in sorted(history.live().values(), key=lambda s: s.completed):
        if instant.action != "clean":
            continue
        plan = plan_of(history.table, instant.requested, "clean")
        keep = int(plan.get("retain") or retain)
        before = [c for c in ordered if c < instant.requested]
        cut = before[-keep] if keep and len(before) > keep else None
        for path in history.meta(instant.requested).get("deleted") or []:
            out[path] = cut
    return out


def never_existed(consumed: Mapping[str, Iterable[str]], order: dict[str, list[str]]) -> list[str]:
    """Streams whose consumed files are not a prefix of their arrival order: a state that never existed."""
    out = []
    for stream in STREAMS:
        names = set(consumed.get(stream, []))
        prefix = order[stream][: len(names)]
        if names != set(prefix):
            skipped = sorted(set(prefix) - names)
            out.append(f"{stream} had {sorted(names - set(prefix))[:3]} but not the earlier {skipped[:3]}")
    return out


def check_reads(work: Path, reference: Reference, report: Report, history: History | None = None) -> None:
    """Every recorded read against the reference merge of exactly the instants its snapshot had."""
    settings = load_settings(work)
    history = history or History.load(table_dir(work))
    seen = Observations.load(work)
    final = {s.requested: s.completed for s, _meta in history.live_deltacommits()}
    cleaned = cleaned_files(work, history, seen, settings.retain)
    latest_horizon = max(seen.latest_horizon(), history.horizon)
    order = {s: [p.name for p in staged_files(work, s)] for s in STREAMS}
    keys_of = erase_keys(work, history)
    archived_at = archived_times(history)
    for path in sorted((work / "reads").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        name = record["name"]
        until = record["until"]
        horizon = record.get("horizon") or ""
        snapshot = {key[0] for key in record.get("snapshot", [])}
        undone = sorted(snapshot & set(history.undone))
        if record["mode"] != "current-moved":
            # The snapshot's instants (past its checkpoint) must be the final timeline's instants completed by
            # then: none vanished later (a committed write lost) unless a rollback or restore names it, and
            # none completed "in the past" (a partial commit shown).
            now = {r: c for r, c in final.items() if horizon < c <= until}
            then = {v["requested"]: v["completed"] for v in record["visible"]}
            lost = sorted(set(then) - set(now) - set(history.undone))
            late = sorted(set(now) - set(then))
            if lost or late or any(then[r] != now[r] for r in set(then) & set(now)):
                report.violations.append(
                    f"read {name} as of {until}: its snapshot had instants {lost} the final timeline lacks (and "
                    f"no rollback or restore names), and lacked {late} the final timeline has completed by then"
                )
                continue
        error = record.get("error")
        if error is not None:
            message = error["type"] + ": " + error["message"]
            refused = error["type"] == "UsageError" and "clean removed" in message
            missing = "data file is missing" in message or "FileNotFoundError" in message
            vanished = "vanished" in message  # a completed instant's file, gone between listing and reading
            cuts = [cut for path, cut in cleaned.items() if path in message]
            if (refused or missing) and cuts and all(cut is not None and until < cut for cut in cuts):
                # A clean removed the file legitimately: this time was outside its retention when it ran.
                report.reads_skipped["outside retention" if refused else "file cleaned during the read"] += 1
            elif (missing or vanished or refused) and undone:
                # A restore was taking this snapshot apart (newest first): its intermediate states may need
                # files cleaned long ago, or find instants and files gone. Reading during a restore may fail.
                report.reads_skipped["restored away during the read"] += 1
            elif "older than the archived timeline" in message and until < latest_horizon:
                report.reads_skipped["archived during the read"] += 1
            else:
                report.violations.append(f"read {name} as of {until} failed: {message[:300]}")
            continue
        if record["mode"] == "current-moved":
            report.reads_skipped["snapshot moved during a read without as_of"] += 1
            continue
        moved = record.get("moved")
        if horizon and until < horizon:
            report.violations.append(
                f"read {name} as of {until} succeeded though the archive horizon was already {horizon}"
            )
            continue
        consumed: dict[str, list[str]] = {s: list(record.get("checkpoint_consumed", {}).get(s, [])) for s in STREAMS}
        for instant in record["visible"]:
            consumed[instant["stream"]].extend(instant["sources"])
        duplicated = {s: sorted(n for n, c in Counter(v).items() if c > 1) for s, v in consumed.items()}
        if any(duplicated.values()):
            report.violations.append(f"read {name}: a landing file was consumed twice: {duplicated}")
        strange = never_existed(consumed, order)
        if strange:
            report.violations.append(
                f"read {name} as of {until} saw a state that never existed (landing files out of arrival order): "
                + "; ".join(strange)
            )
        if moved:  # the listing was a real state, but the read may have seen a later one
            report.reads_skipped[f"snapshot {moved}"] += 1
            continue
        drops = read_drops(record, history, keys_of, archived_at)
        if drops is None:
            report.reads_skipped["an erase it saw is unknown now (undone since, keys not logged)"] += 1
            continue
        actual = pq.read_table(work / "reads" / f"{name}.parquet")
        problems = table_differences(actual, reference.expected(consumed, drops), work)
        report.reads_checked += 1
        if problems:
            report.violations.append(f"read {name} ({record['mode']}, as of {until}): " + "; ".join(problems[:4]))


def read_drops(
    record: dict[str, Any],
    history: History,
    keys_of: Mapping[str, frozenset[int]],
    archived_at: Mapping[tuple[str, str], str],
) -> Drops | None:
    """What the erases a read's state had took from its files; None when that cannot be known."""
    until, horizon = record["until"], record.get("horizon") or ""
    seen = [Seen(*key) for key in record.get("snapshot", []) if key[2] <= until]
    seen += [s for s, _meta, _batch in history.archived.values() if s.completed <= min(horizon, until)]
    erases, unknown = erases_of(seen, keys_of)
    if unknown:
        return None
    if not erases:
        return {}
    files = [(v["stream"], n, v["completed"]) for v in record["visible"] for n in v["sources"]]
    for stream, names in record.get("checkpoint_consumed", {}).items():
        for name in names:
            if (stream, name) not in archived_at:
                return None
            files.append((stream, name, archived_at[(stream, name)]))
    return dropped(files, erases)


def check_table(
    work: Path, reference: Reference, report: Report, history: History | None = None
) -> dict[str, int | str | None]:
    """The final table: ground truth, exactly-once ingest in arrival order, no pending instant, no orphan."""
    from stitchlake.concurrency.markers import instants_with_markers
    from stitchlake.layout.names import parse_name

    table = open_torture_table(work)
    history = history or History.load(table_dir(work))
    storage = table.storage
    for requested, action, state in history.pending:
        report.violations.append(f"instant {requested} {action} ({state}) is still pending after the final clean")
    consumed = history.consumed()
    erases, unknown = erases_of(history.live().values(), erase_keys(work, history))
    if unknown:
        report.violations.append(f"live erase(s) {unknown}: their keys are known neither from the log nor the table")
    drops = dropped(history.consumed_at(), erases)
    erased = frozenset().union(*(e.keys for e in erases))
    for stream in STREAMS:
        landed = sorted(p.name for p in staged_files(work, stream))
        twice = sorted(n for n, c in Counter(consumed[stream]).items() if c > 1)
        if twice:
            report.violations.append(f"{stream}: landing files ingested more than once: {twice}")
        never = sorted(set(landed) - set(consumed[stream]))
        if never:
            report.violations.append(f"{stream}: landing files never ingested: {never}")
    newest: dict[str, tuple[str, Seen]] = {}
    for instant, meta in history.live_deltacommits():
        stream = str(meta.get("stream"))
        names = sources_of(meta)
        earlier = newest.get(stream)
        if earlier is not None and names and min(names) < earlier[0]:
            report.violations.append(
                f"{stream}: {instant} consumed {min(names)} after {earlier[1]} had consumed {earlier[0]}: landing "
                "files were taken out of arrival order (the table went through a state that never existed)"
            )
        if names and (earlier is None or max(names) > earlier[0]):
            newest[stream] = (max(names), instant)

    view = table.view()
    live = {f.path for f in view.live_files()}
    on_disk = set()
    strays = []
    for path in storage.walk_files():
        if path.startswith(".stitch/"):
            continue
        if parse_name(path.rsplit("/", 1)[-1]):
            on_disk.add(path)
        else:
            strays.append(path)
    orphans = sorted(on_disk - live)
    missing = sorted(live - on_disk)
    if orphans:
        report.violations.append(f"{len(orphans)} orphan data file(s) remain, e.g. {orphans[:3]}")
    if missing:
        report.violations.append(f"{len(missing)} data file(s) named by the timeline are missing, e.g. {missing[:3]}")
    if strays:
        report.violations.append(f"{len(strays)} stray file(s) in the data folders, e.g. {strays[:3]}")
    markers = instants_with_markers(storage)
    if markers:
        report.violations.append(f"markers left behind for instant(s) {markers[:5]}")

    truth = pq.read_table(work / "staging" / "truth.parquet")
    final_path = work / "final.parquet"
    done = subprocess.run(
        stitch("read", "-c", str(work / CONFIG_NAME), "--out", str(final_path)),
        capture_output=True,
        text=True,
        env=child_env(),
    )
    if done.returncode != 0:
        report.violations.append(f"`stitch read` of the final table exited {done.returncode}: {done.stderr[-300:]}")
    else:
        # The generator's truth knows nothing of erases: held to it, the keys an erase touched are left out (the
        # reference merge below holds them).
        final = _without(pq.read_table(final_path), erased)
        problems = table_differences(final, _without(truth, erased), work)
        report.violations += [f"final table vs ground truth: {p}" for p in problems]
    rows = 0
    try:
        in_process = table.read()
    except Exception as exc:
        report.violations.append(f"reading the final table failed: {type(exc).__name__}: {exc}")
    else:
        rows = in_process.num_rows
        problems = table_differences(in_process, reference.expected(consumed, drops), work)
        report.violations += [f"final table vs the reference merge of its instants: {p}" for p in problems]
        if all(not s.logs for s in view.latest_slices()):  # fully compacted: base files alone must say the same
            try:
                optimized = table.read(mode="read_optimized")
            except Exception as exc:
                report.violations.append(f"reading the final table read-optimized failed: {exc}")
            else:
                problems = table_differences(optimized, reference.expected(consumed, drops), work)
                report.violations += [f"final table read-optimized: {p}" for p in problems]
    counts = Counter(s.action for s in history.live().values())
    return {
        "erases": counts["erase"],
        "deltacommits": counts["deltacommit"],
        "compactions": counts["compaction"],
        "cleans": counts["clean"],
        "rollbacks": counts["rollback"],
        "savepoints": counts["savepoint"],
        "restores": counts["restore"],
        "undone": len(history.undone),
        "archived": len(history.archived),
        "horizon": history.horizon or None,
        "rows": rows,
    }


def _without(table: pa.Table, keys: frozenset[int]) -> pa.Table:
    import pyarrow.compute as pc

    if not keys:
        return table
    return table.filter(pc.invert(pc.is_in(table.column("order_id"), pa.array(sorted(keys), pa.int64()))))


def check_workers(work: Path, report: Report) -> Counter[str]:
    """Worker logs: a failure that is not "busy, retry later" is a bug the run must not hide."""
    events: Counter[str] = Counter()
    for path in sorted((work / "logs").glob("*.jsonl")):
        if path.name in (OBSERVED_LOG, HORIZONS_LOG):
            continue
        for record in read_lines(path):
            events[record.get("event", "?")] += 1
            if record.get("event") == "error" and ZOMBIE_REFUSED in record.get("message", ""):
                events["zombie refused"] += 1
            elif record.get("event") in ("error", "unexpected"):
                report.violations.append(
                    f"{record['role']} (pid {record['pid']}) failed: {record['error']}: {record['message'][:300]}"
                )
    return events


def check(work: Path, out: Callable[[str], None]) -> tuple[Report, dict[str, Any], Counter[str]]:
    report = Report()
    reference = Reference(work)
    started = time.monotonic()
    history = History.load(table_dir(work))
    check_history(work, history, Observations.load(work), report)
    check_reads(work, reference, report, history)
    commits = check_table(work, reference, report, history)
    events = check_workers(work, report)
    out(f"checked {report.reads_checked} reads, the history and the final table in {time.monotonic() - started:.1f}s")
    return report, commits, events
