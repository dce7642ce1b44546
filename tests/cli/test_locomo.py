"""The LoCoMo converter and answer recall, on a small sample built here."""

import json
import zipfile

import pytest

from pipecat_summarizer_cli.replay.locomo import (
    answer_recall,
    content_words,
    convert,
    load_samples,
    select_samples,
    session_note,
)

SAMPLE = {
    "speaker_a": "Jon",
    "speaker_b": "Gina",
    "session_1_date_time": "4:04 pm on 20 January, 2023",
    "session_1": [
        {"speaker": "Gina", "dia_id": "D1:1", "text": "Hey Jon! What's new?"},
        {"speaker": "Jon", "dia_id": "D1:2", "text": "I lost my job as a banker."},
        {"speaker": "Jon", "dia_id": "D1:3", "text": "So I'm opening a dance studio."},
        {
            "speaker": "Gina",
            "dia_id": "D1:4",
            "text": "Wow!",
            "blip_caption": "a photo of a dance floor",
        },
    ],
    "session_2_date_time": "2:32 pm on 29 January, 2023",
    "session_2": [
        {"speaker": "Jon", "dia_id": "D2:1", "text": "The studio opens in June."},
        {"speaker": "Gina", "dia_id": "D2:2", "text": "I started an online clothing store."},
    ],
    "session_2_summary": "not a session",
    "qa": [
        {"question": "What did Jon lose?", "answer": "his job as a banker", "category": 1},
        {"question": "When does it open?", "answer": "June", "category": 2},
        {"question": "What does Gina sell?", "answer": "clothes online", "category": 4},
        {"question": "Adversarial", "adversarial_answer": "Not mentioned", "category": 5},
        {"question": "Year?", "answer": 2023, "category": 2},
    ],
}


def test_convert_roles_session_notes_and_merging():
    conv = convert(SAMPLE, "30")
    t = conv.transcript
    assert conv.sample_id == "30" and conv.sessions == 2 and conv.dialog_turns == 6
    roles = [m["role"] for m in t.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "Jon" in t.messages[0]["content"] and "Gina" in t.messages[0]["content"]
    # Session 1 is opened by B: a user message holding only the note comes first.
    assert t.messages[1]["content"] == "[Session 1 — 20 January 2023, 4:04 pm]"
    assert t.messages[2]["content"] == "Hey Jon! What's new?"
    # Consecutive lines of one speaker are one message; photos become captions.
    assert t.messages[3]["content"] == "I lost my job as a banker.\nSo I'm opening a dance studio."
    assert t.messages[4]["content"] == "Wow! [shares a photo: a photo of a dance floor]"
    # A session A opens gets the note prepended to its first line.
    assert (
        t.messages[5]["content"]
        == "[Session 2 — 29 January 2023, 2:32 pm] The studio opens in June."
    )
    assert len(t.turns) == 3
    # Category 5 (no answer) is skipped; non-string answers become text.
    assert [q.answer for q in conv.qa] == ["his job as a banker", "June", "clothes online", "2023"]


def test_answer_recall_counts_content_words():
    assert content_words("his job as a banker") == ["job", "banker"]
    conv = convert(SAMPLE, "30")
    text = "Jon lost his JOB; he opens in june. Gina has a store. 2023"
    recall, items = answer_recall(text, conv.qa)
    # job: 1/2, June: 1, clothes online: 0, 2023: 1
    assert items == 4
    assert recall == pytest.approx((0.5 + 1 + 0 + 1) / 4)
    assert answer_recall("", []) == (0.0, 0)


def test_session_note_formats():
    assert session_note(3, "1:56 pm on 8 May, 2023") == "[Session 3 — 8 May 2023, 1:56 pm]"
    assert session_note(4, None) == "[Session 4]"
    assert session_note(5, "sometime") == "[Session 5 — sometime]"


def test_load_from_zip_json_and_folder(tmp_path):
    folder = tmp_path / "data" / "multimodal_dialog" / "locomo10_v2"
    folder.mkdir(parents=True)
    for sid in ("30", "26"):
        (folder / f"{sid}.json").write_text(json.dumps(SAMPLE))
    archive = tmp_path / "locomo.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for sid in ("30", "26"):
            z.write(folder / f"{sid}.json", f"data/multimodal_dialog/locomo10_v2/{sid}.json")
    assert [s for s, _ in load_samples(archive)] == ["26", "30"]
    assert [s for s, _ in load_samples(tmp_path / "data")] == ["26", "30"]
    assert [s for s, _ in load_samples(folder / "30.json")] == ["30"]
    # The locomo10.json layout: a list of samples with sample_id and conversation.
    listed = tmp_path / "locomo10.json"
    listed.write_text(
        json.dumps(
            [
                {
                    "sample_id": "conv-30",
                    "conversation": {k: v for k, v in SAMPLE.items() if k != "qa"},
                    "qa": SAMPLE["qa"],
                }
            ]
        )
    )
    ((sid, sample),) = load_samples(listed)
    assert sid == "conv-30"
    assert len(convert(sample).transcript.turns) == 3

    samples = load_samples(archive)
    assert [s for s, _ in select_samples(samples)] == ["26", "30"]
    assert [s for s, _ in select_samples(samples, ids=["conv-30"])] == ["30"]
    assert [s for s, _ in select_samples(samples, index=0)] == ["26"]
    with pytest.raises(ValueError, match="no LoCoMo conversation '99'"):
        select_samples(samples, ids=["99"])
    with pytest.raises(ValueError, match="out of range"):
        select_samples(samples, index=5)


def test_convert_rejects_samples_without_speakers_or_sessions():
    with pytest.raises(ValueError, match="speaker_a and speaker_b"):
        convert({"session_1": []}, "x")
    with pytest.raises(ValueError, match="no sessions"):
        convert({"speaker_a": "A", "speaker_b": "B"}, "x")


async def test_replay_of_a_converted_sample_reports_recall():
    from pipecat_summarizer_cli.replay.runner import run_strategy

    conv = convert(SAMPLE, "30")
    result = await run_strategy(conv.transcript, "full_buffer")
    recall, items = answer_recall(result.final_text, conv.qa)
    # Gina's last line answers the final request, so it is not in it: "clothes online"
    # scores 0; the other answers are all in the full buffer.
    assert items == 4 and recall == pytest.approx((1 + 1 + 0 + 1) / 4)
