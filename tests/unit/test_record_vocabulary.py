"""Records on disk hold the vocabulary's words (`stitchlake.vocabulary`): they read back as its members, and a word
outside it is damage named by its field, as any field of the wrong type is (a new word comes only with a new
metadata format version, which is refused before this)."""

from __future__ import annotations

from typing import Any

import pytest

from stitchlake.errors import CorruptFileError
from stitchlake.timeline.metadata import PublishCommit, PublishPlan, RestorePlan, UndoTarget, dump, load
from stitchlake.timeline.timeline import typed
from stitchlake.vocabulary import Action, PublishFormat, State


def test_stored_words_read_back_as_the_vocabularys_members() -> None:
    target = UndoTarget("20261122221609807", Action.DELTACOMMIT, State.INFLIGHT, None, ("a.parquet",))
    plan = load(RestorePlan, dump(RestorePlan(targets=(target,), savepoint="x")))
    (back,) = plan.targets
    assert back == target and back.action is Action.DELTACOMMIT and back.state is State.INFLIGHT
    commit = load(PublishCommit, {"format": "iceberg", "location": "/p", "action": "publish"})
    assert commit.format is PublishFormat.ICEBERG and commit.action is Action.PUBLISH
    assert dump(commit)["format"] == "iceberg", "written as the word it always was"
    assert load(PublishPlan, {"format": "delta"}).format is PublishFormat.DELTA


@pytest.mark.parametrize(
    ("cls", "content", "field"),
    [
        (PublishCommit, {"format": "hudi", "location": "/p"}, "format"),
        (PublishCommit, {"location": "/p"}, "format"),
        (PublishPlan, {"format": "DELTA"}, "format"),
        (PublishCommit, {"format": "delta", "action": "merge"}, "action"),
        (RestorePlan, {"targets": [{"requested": "1", "action": "deltacommit", "state": "paused"}]}, "targets.0.state"),
        (RestorePlan, {"targets": [{"requested": "1", "action": "upsert", "state": "inflight"}]}, "targets.0.action"),
    ],
)
def test_a_word_outside_the_vocabulary_is_damage_named_by_its_field(
    cls: type[Any], content: dict[str, Any], field: str
) -> None:
    """Before, any string passed: a publish commit of an unknown format was skipped in silence where the formats
    were looked at, and an undo target's unknown state failed only when a rollback finally came to undo it."""
    with pytest.raises(CorruptFileError, match=rf"t/x\.json: {field}: .*\(damaged timeline\)"):
        typed(cls, content, "t/x.json")
