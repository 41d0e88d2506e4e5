"""The timeline (design.md §4): unique increasing instant times under real multi-process contention, instant file
names, completion-time ordering from names alone, filters, metadata and state transitions. Real files only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stitchlake.errors import CorruptFileError, StitchError
from stitchlake.paths import TIMELINE_DIR
from stitchlake.storage import LocalStorage
from stitchlake.timeline.actions import REWRITES, kind_of
from stitchlake.timeline.clock import from_millis, is_time, next_time, parse_user_time, to_millis
from stitchlake.timeline.instant import (
    Action,
    Instant,
    State,
    completed_file_name,
    parse_file_name,
    pending_file_name,
)
from stitchlake.timeline.metadata import (
    METADATA_VERSION,
    CompactionCommit,
    CompactionPlan,
    DataFile,
    DeltaCommit,
    DeltaCommitPlan,
    ErasePlan,
    FileSlice,
)
from stitchlake.timeline.timeline import (
    Timeline,
    delete_instant,
    draw_time,
    timeline_path,
    write_completed,
    write_inflight,
    write_requested,
)

# ------------------------------------------------------------------------------ concurrent time drawing


# ------------------------------------------------------------------------------------------ the clock


def test_clock_going_backwards_still_moves_forward() -> None:
    latest = "20261121103000500"
    earlier_wall_clock = to_millis("20261121102959000")  # 1.5 s behind the timeline
    drawn = next_time(["20261121102000000", latest, "20261121101000000"], now_ms=earlier_wall_clock)
    assert drawn == "20261121103000501"
    assert drawn > latest
    again = next_time([latest, drawn], now_ms=earlier_wall_clock)
    assert again == "20261121103000502" and again > drawn


def test_clock_follows_the_wall_clock_when_it_is_ahead() -> None:
    now = to_millis("20261121110000123")
    assert next_time(["20261121103000500"], now_ms=now) == "20261121110000123"
    assert next_time([], now_ms=now) == "20261121110000123"
    assert is_time(next_time([]))


def test_clock_rolls_over_second_minute_day_and_year() -> None:
    assert next_time(["20261231235959999"], now_ms=0) == "20270101000000000"
    assert next_time(["20260228235959999"], now_ms=0) == "20260301000000000"
    assert next_time(["20240228235959999"], now_ms=0) == "20240229000000000"


def test_millis_round_trip() -> None:
    for text in ("19700101000000000", "20261121103000500", "20991231235959999", "20240229120000001"):
        assert from_millis(to_millis(text)) == text
    assert to_millis("19700101000001001") == 1001


def test_parse_user_time() -> None:
    assert parse_user_time("20261121103000500") == "20261121103000500"
    assert parse_user_time("2026-11-21T10:30:00.5Z") == "20261121103000500"
    assert parse_user_time("2026-11-21T11:30:00.123+01:00") == "20261121103000123"
    assert parse_user_time("2026-11-21") == "20261121000000000"
    with pytest.raises(ValueError, match="neither an instant time"):
        parse_user_time("yesterday")
    for impossible in ("20261301000000000", "99999999999999999", "20260230120000000"):  # month 13, Feb 30
        with pytest.raises(ValueError, match="not a real time"):
            parse_user_time(impossible)


# ------------------------------------------------------------------------------------------ file names


@pytest.mark.parametrize("action", [a.value for a in Action])
@pytest.mark.parametrize("state", list(State))
def test_instant_file_names_round_trip(action: str, state: State) -> None:
    completed = "20261121103000900" if state is State.COMPLETED else None
    instant = Instant("20261121103000500", Action(action), state, completed)
    name = instant.file_name
    if state is State.COMPLETED:
        suffix = "commit" if action == Action.COMPACTION else action
        assert name == f"20261121103000500_20261121103000900.{suffix}"
    else:
        assert name == f"20261121103000500.{action}.{state.label}"
    assert parse_file_name(name) == instant


def test_compaction_completes_as_commit() -> None:
    assert completed_file_name("20261121103000500", "20261121103000900", Action.COMPACTION).endswith(".commit")
    parsed = parse_file_name("20261121103000500_20261121103000900.commit")
    assert parsed is not None and parsed.action == Action.COMPACTION and parsed.is_completed
    assert parse_file_name("20261121103000500_20261121103000900.compaction") is None
    assert parse_file_name("20261121103000500.commit.requested") is None


@pytest.mark.parametrize(
    "name",
    [
        "",
        "archive",
        "20261121103000500.deltacommit",
        "20261121103000500.deltacommit.completed",
        "20261121103000500.merge.requested",
        "2026112110300050.deltacommit.requested",
        "20261121103000500_2026112110300090.deltacommit",
        "20261121103000500_20261121103000900.bogus",
        "20261121103000500.deltacommit.requested.tmp",
        ".20261121103000500.deltacommit.requested.abc.tmp",
        "x20261121103000500.clean.inflight",
    ],
)
def test_garbage_names_are_not_instants(name: str) -> None:
    assert parse_file_name(name) is None


# ------------------------------------------------------------------------------------ timeline on disk


def _storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(str(tmp_path / "table"))


def _complete(storage: LocalStorage, requested: str, completed: str, action: str = Action.DELTACOMMIT) -> Instant:
    instant = write_requested(storage, requested, action, kind_of(action).plan())
    return write_completed(storage, instant, completed, kind_of(action).commit())


def test_completed_instants_sort_by_completion_time_from_names_alone(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    # requested order a < b < c < d; completion order c, a, d, b
    spec = [
        ("20260101000000001", "20260101000000007"),
        ("20260101000000002", "20260101000000020"),
        ("20260101000000003", "20260101000000005"),
        ("20260101000000004", "20260101000000010"),
    ]
    for requested, completed in spec:
        _complete(storage, requested, completed)
        # garbage content: ordering must come from names, never from reading files
        storage.write_atomic(timeline_path(completed_file_name(requested, completed, Action.DELTACOMMIT)), b"\x00{")
    timeline = Timeline.load(storage)
    assert [i.requested for i in timeline.instants] == [r for r, _ in spec]
    assert [i.requested for i in timeline.completed()] == [
        "20260101000000003",
        "20260101000000001",
        "20260101000000004",
        "20260101000000002",
    ]
    latest = timeline.latest_completed()
    assert latest is not None and latest.requested == "20260101000000002"
    assert timeline.latest_time() == "20260101000000020"
    # and the metadata, once asked for, is refused with the file named
    with pytest.raises(CorruptFileError) as info:
        timeline.commit(timeline.completed()[0])
    assert completed_file_name("20260101000000003", "20260101000000005", Action.DELTACOMMIT) in str(info.value)


def _mixed_timeline(storage: LocalStorage) -> None:
    _complete(storage, "20260101000000100", "20260101000000200")
    _complete(storage, "20260101000000110", "20260101000000150", Action.COMPACTION)
    _complete(storage, "20260101000000120", "20260101000000300")
    _complete(storage, "20260101000000130", "20260101000000250", Action.CLEAN)
    pending = write_requested(storage, "20260101000000140", Action.DELTACOMMIT, DeltaCommitPlan(stream="payments"))
    write_inflight(storage, pending)
    write_requested(storage, "20260101000000160", Action.COMPACTION, CompactionPlan())
    write_requested(storage, "20260101000000400", Action.ERASE, ErasePlan())
    # noise the loader must ignore
    storage.write_atomic(f"{TIMELINE_DIR}/README", b"not an instant")
    storage.makedirs(f"{TIMELINE_DIR}/archive")


def test_filters(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    _mixed_timeline(storage)
    timeline = Timeline.load(storage)
    assert len(timeline) == 7

    def req(items: list[Instant]) -> list[str]:
        return [i.requested[-3:] for i in items]

    assert req(timeline.completed()) == ["110", "100", "130", "120"]
    assert req(timeline.pending()) == ["140", "160", "400"]
    assert req(timeline.completed([Action.DELTACOMMIT])) == ["100", "120"]
    assert req(timeline.completed([Action.COMPACTION, Action.CLEAN])) == ["110", "130"]
    assert req(timeline.pending([Action.COMPACTION])) == ["160"]
    assert req(timeline.pending(REWRITES)) == ["160", "400"]
    # (since, until] by completion time: 150 excluded, 250 included
    assert req(timeline.completed(since="20260101000000150", until="20260101000000250")) == ["100", "130"]
    assert req(timeline.completed(since="20260101000000150")) == ["100", "130", "120"]
    assert req(timeline.completed(until="20260101000000150")) == ["110"]
    assert req(timeline.completed([Action.DELTACOMMIT], since="20260101000000200")) == ["120"]
    assert timeline.completed(since="20260101000000300") == []
    assert req(timeline.filter(states=[State.INFLIGHT])) == ["140"]
    assert req(timeline.filter(actions=[Action.COMPACTION], states=[State.REQUESTED])) == ["160"]
    assert req(timeline.filter(actions=[Action.COMPACTION])) == ["110", "160"]
    inflight = timeline.get("20260101000000140")
    assert inflight is not None and inflight.state is State.INFLIGHT
    assert timeline.stream_of(inflight) == "payments"
    assert timeline.get("20260101000000999") is None
    latest_delta = timeline.latest_completed([Action.DELTACOMMIT])
    assert latest_delta is not None and latest_delta.requested == "20260101000000120"
    assert timeline.latest_time() == "20260101000000400"


def test_draw_time_is_after_every_requested_and_completed_time(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    _mixed_timeline(storage)
    assert draw_time(storage, now_ms=0) == "20260101000000401"
    _complete(storage, "20260101000000500", "20260101000000900")
    assert draw_time(storage, now_ms=0) == "20260101000000901"


def test_metadata_has_format_version_and_content(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    instant = write_requested(storage, "20260101000000100", Action.DELTACOMMIT, DeltaCommitPlan(stream="orders"))
    added = DataFile("p=a/x.log.parquet", "p=a", "00000", "log", "orders", 3, 100)
    done = write_completed(storage, instant, "20260101000000200", DeltaCommit(stream="orders", added=(added,)))
    raw = json.loads(storage.read_bytes(timeline_path(done.file_name)))
    assert raw["format_version"] == METADATA_VERSION
    assert [entry["path"] for entry in raw["added"]] == ["p=a/x.log.parquet"]
    assert (raw["action"], raw["requested"], raw["completed"]) == (
        Action.DELTACOMMIT,
        "20260101000000100",
        "20260101000000200",
    )
    requested_raw = json.loads(
        storage.read_bytes(timeline_path(pending_file_name(instant.requested, "deltacommit", State.REQUESTED)))
    )
    assert requested_raw["format_version"] == METADATA_VERSION and requested_raw["stream"] == "orders"
    timeline = Timeline.load(storage)
    loaded = timeline.get("20260101000000100")
    assert loaded is not None
    assert timeline.commit(loaded).added_files == (added,)
    plan = timeline.plan(loaded)
    assert isinstance(plan, DeltaCommitPlan) and plan.stream == "orders"


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\x01\x02garbage", b"{not json", b"[1, 2, 3]", b'{"format_version": 99, "added": []}', b"\xff\xfe"],
)
def test_garbage_timeline_file_names_the_file(tmp_path: Path, garbage: bytes) -> None:
    storage = _storage(tmp_path)
    done = _complete(storage, "20260101000000100", "20260101000000200")
    storage.write_atomic(timeline_path(done.file_name), garbage)
    timeline = Timeline.load(storage)
    with pytest.raises(CorruptFileError) as info:
        timeline.commit(done)
    assert timeline_path(done.file_name) in str(info.value)


def test_garbage_requested_file_names_the_file(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    instant = write_requested(storage, "20260101000000100", Action.COMPACTION, CompactionPlan())
    name = pending_file_name(instant.requested, instant.action, State.REQUESTED)
    storage.write_atomic(timeline_path(name), b"garbage")
    timeline = Timeline.load(storage)
    with pytest.raises(CorruptFileError) as info:
        timeline.plan(instant)
    assert name in str(info.value)


def test_transitions(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    plan = CompactionPlan(operations=(FileSlice("p=a", "00001"),))
    requested = write_requested(storage, "20260101000000100", Action.COMPACTION, plan)
    assert requested == Instant("20260101000000100", Action.COMPACTION, State.REQUESTED)
    timeline = Timeline.load(storage)
    assert timeline.get(requested.requested) == requested
    assert timeline.pending() == [requested] and timeline.completed() == []

    inflight = write_inflight(storage, requested)
    assert inflight.state is State.INFLIGHT
    assert Timeline.load(storage).get(requested.requested) == inflight
    assert write_inflight(storage, requested) == inflight  # idempotent: a resumed run marks inflight again

    done = write_completed(storage, inflight, "20260101000000200", CompactionCommit())
    assert done == Instant("20260101000000100", Action.COMPACTION, State.COMPLETED, "20260101000000200")
    names = set(storage.list_names(TIMELINE_DIR))
    assert names == {
        "20260101000000100.compaction.requested",
        "20260101000000100.compaction.inflight",
        "20260101000000100_20260101000000200.commit",
    }
    timeline = Timeline.load(storage)
    assert timeline.get(requested.requested) == done
    assert timeline.pending() == [] and timeline.completed() == [done]
    # the plan stays readable after completion
    assert timeline.plan(done) == plan

    with pytest.raises(StitchError, match="already completed"):
        write_completed(storage, inflight, "20260101000000200", CompactionCommit())
    with pytest.raises(StitchError, match="already exists"):
        write_requested(storage, "20260101000000100", Action.COMPACTION, CompactionPlan())
    with pytest.raises(ValueError, match="unknown action"):
        write_requested(storage, "20260101000000300", "merge", CompactionPlan())


class _RecordingStorage(LocalStorage):
    """Real local storage that also remembers the order of deletions."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.deleted: list[str] = []

    def delete(self, path: str) -> bool:
        self.deleted.append(path)
        return super().delete(path)


def test_delete_instant_removes_completed_file_first(tmp_path: Path) -> None:
    storage = _RecordingStorage(str(tmp_path / "table"))
    instant = write_requested(storage, "20260101000000100", Action.DELTACOMMIT, DeltaCommitPlan())
    write_inflight(storage, instant)
    done = write_completed(storage, instant, "20260101000000200", DeltaCommit())
    other = _complete(storage, "20260101000000300", "20260101000000400")
    delete_instant(storage, done)
    assert storage.deleted[0] == timeline_path("20260101000000100_20260101000000200.deltacommit")
    assert set(storage.deleted) == {
        timeline_path("20260101000000100_20260101000000200.deltacommit"),
        timeline_path("20260101000000100.deltacommit.inflight"),
        timeline_path("20260101000000100.deltacommit.requested"),
    }
    timeline = Timeline.load(storage)
    assert timeline.get("20260101000000100") is None
    assert timeline.instants == [other]


def test_delete_pending_instant(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    instant = write_inflight(
        storage, write_requested(storage, "20260101000000100", Action.DELTACOMMIT, DeltaCommitPlan())
    )
    delete_instant(storage, instant)
    assert storage.list_names(TIMELINE_DIR) == []


def test_a_pending_instant_that_vanishes_after_the_listing_has_no_content(tmp_path: Path) -> None:
    """Found by the torture run: a writer's busy check listed a pending deltacommit that a rollback (which needs
    no lock to undo) deleted before its requested file was read; the check failed instead of finding no writer."""
    storage = _storage(tmp_path)
    done = _complete(storage, "20260101000000100", "20260101000000200")
    pending = write_inflight(
        storage, write_requested(storage, "20260101000000300", Action.DELTACOMMIT, DeltaCommitPlan(stream="x"))
    )
    timeline = Timeline.load(storage)
    delete_instant(storage, pending)  # undone after the listing
    listed = timeline.get(pending.requested)
    assert listed is not None and not listed.is_completed
    assert timeline.plan(listed) == DeltaCommitPlan()
    assert timeline.stream_of(listed) is None

    storage.delete(timeline_path(done.file_name))  # a completed instant vanishing is not normal: say so
    with pytest.raises(StitchError, match="vanished"):
        timeline.commit(done)


def test_an_alter_record_without_its_schema_is_refused_as_damage(tmp_path: Path) -> None:
    from stitchlake.config import StoredSchema
    from stitchlake.timeline.schemas import history

    storage = _storage(tmp_path)
    _complete(storage, "20260101000000100", "20260101000000200", Action.ALTER)  # its commit holds no schema
    base = StoredSchema(1, "t", (), (), 4, "parquet", {})
    with pytest.raises(CorruptFileError, match="alter 20260101000000100: its completed instant file holds no schema"):
        history(Timeline.load(storage), base)
