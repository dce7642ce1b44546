"""An integer too large for a float or for a signed 64-bit column, in any numeric field of
any parameter group, is refused at construction with the field's ``ValueError``: before,
``RecallParams(max_tokens=10**400)`` was accepted (an int is finite however large) and a
float field given one raised ``OverflowError`` in the first turn's arithmetic."""

from __future__ import annotations

import dataclasses

import pytest
from pipecat.utils.context.llm_context_summarization import LLMAutoContextSummarizationConfig

from pipecat_summarizer import params
from pipecat_summarizer._validation import LARGEST_INTEGER, _annotations, _numeric_kind
from pipecat_summarizer.store import SQLiteMemoryStore

#: Every public parameter group (a group added later is covered without touching this).
GROUPS = [getattr(params, name) for name in params.__all__ if name.endswith("Params")]

#: What a group needs besides the field under test.
REQUIRED: dict[type, dict] = {params.CeilingParams: {"max_request_tokens": 8000}}


def numeric_fields() -> list[tuple[type, str, str]]:
    out = []
    for cls in GROUPS:
        hints = _annotations(cls)
        for field in dataclasses.fields(cls):
            kind = _numeric_kind(hints.get(field.name, field.type))
            if kind is not None:
                out.append((cls, field.name, kind[0]))
    return out


FIELDS = numeric_fields()


def test_every_group_has_numeric_fields_to_check():
    # the enumeration itself must find the fields, or the tests below check nothing
    assert {cls for cls, _, _ in FIELDS} >= {params.RecallParams, params.MemoryParams}
    assert len(GROUPS) >= 11
    assert len(FIELDS) >= 30


@pytest.mark.parametrize(
    "huge",
    [10**400, -(10**400), 2**63, -(2**63), 10**5000],
    ids=["10^400", "-10^400", "2^63", "-2^63", "10^5000"],
)
@pytest.mark.parametrize(("cls", "name", "kind"), FIELDS, ids=lambda v: getattr(v, "__name__", v))
def test_an_integer_past_64_bits_is_refused_by_its_field(cls, name, kind, huge):
    with pytest.raises(ValueError, match=name) as caught:
        cls(**{**REQUIRED.get(cls, {}), name: huge})
    # the message never holds the number itself (10**5000 has no repr: Python refuses
    # to write an int of more than 4,300 digits)
    assert "bits" in str(caught.value) and len(str(caught.value)) < 300


@pytest.mark.parametrize(("cls", "name", "kind"), FIELDS, ids=lambda v: getattr(v, "__name__", v))
def test_the_largest_integer_is_judged_by_the_fields_own_range(cls, name, kind):
    # 2**63 - 1 passes the type check: the field's own rules accept or refuse it, never
    # with anything but ValueError (an OverflowError from their arithmetic was the bug)
    try:
        cls(**{**REQUIRED.get(cls, {}), name: LARGEST_INTEGER})
    except ValueError:
        pass


def test_pipecats_own_config_gets_the_same_check():
    from pipecat.processors.aggregators.llm_context import LLMContext

    from pipecat_summarizer import ContextSummarizer, ExtractiveSummarizer

    with pytest.raises(ValueError, match="max_context_tokens"):
        ContextSummarizer(
            context=LLMContext(),
            config=LLMAutoContextSummarizationConfig(max_context_tokens=10**400),
            summarizer=ExtractiveSummarizer(),
        )


def test_a_store_argument_too(tmp_path):
    with pytest.raises(ValueError, match="busy_timeout_s"):
        SQLiteMemoryStore(tmp_path / "m.db", busy_timeout_s=10**400)
