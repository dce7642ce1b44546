"""The one text vocabulary (pipecat_summarizer/_text): one of each way of reading text.

One splitter, stem, normaliser, stop-word list, message reader and token estimate, each
defined once in ``_text``; where two purposes need different rules, the two functions sit
side by side there, named for the purpose.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from pipecat_summarizer._recall.fusion import SemanticHit
from pipecat_summarizer._recall.render import recall_message, render_recall
from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer._text.messages import (
    ArchivedText,
    content_texts,
    message_text,
    spoken_text,
)
from pipecat_summarizer._text.tokens import (
    EstimateTokenCounter,
    count_text,
    estimate_text_tokens,
    message_texts,
)
from pipecat_summarizer._text.vocabulary import (
    RECALL_STOPWORDS,
    SENTENCE_STOPWORDS,
    STOPWORDS,
    normalize_fact,
    normalize_verbatim,
    search_stem,
    sentence_stem,
    sentence_words,
    words,
)
from pipecat_summarizer.store.base import query_words
from pipecat_summarizer.store.records import SearchHit

PACKAGE = Path(__file__).resolve().parents[2] / "pipecat_summarizer"

#: Names that read text; each may be defined only in ``_text`` (a module-level function or
#: constant of that name anywhere else is a second vocabulary).
VOCABULARY_NAMES = {
    "words",
    "stem",
    "normalize",
    "message_text",
    "estimate_tokens",
    "estimate_text_tokens",
    "STOPWORDS",
}


def _definitions(path: Path) -> set[str]:
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def test_text_is_read_by_one_vocabulary():
    text_package = PACKAGE / "_text"
    elsewhere = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in PACKAGE.rglob("*.py")
        if text_package not in path.parents
        for name in _definitions(path) & VOCABULARY_NAMES
    }
    assert elsewhere == set()


def test_the_two_splitters_are_named_for_their_purpose():
    # the example: recall and the store split like the archive's tokenizers; the
    # extractive summarizer's sentence patterns keep contractions, times and hyphens whole
    assert words("it's 10:30, e-mail") == ["it", "s", "10", "30", "e", "mail"]
    assert sentence_words("it's 10:30, e-mail") == ["it's", "10:30", "e-mail"]
    # the store's search words are the same splitter's (letters and digits only)
    for query in ('Grand-Budapest? NEAR(*) "x"', "it's 10:30, e-mail", "Café 東京 x1"):
        assert query_words(query) == words(query)
    assert query_words("boston_public_garden") == ["boston", "public", "garden"]


def test_the_two_stems_and_normalisers_are_named_for_their_purpose():
    assert search_stem("painting") == "paint" == search_stem("paints")
    assert sentence_stem("painting") == "painting" and sentence_stem("orders") == "order"
    assert normalize_fact("User: Peanut allergy (corrected).") == "peanut allergy"
    assert normalize_verbatim("  Peanut\n allergy. ") == "peanut allergy."


def test_one_stop_word_list_extended_per_reading():
    assert STOPWORDS < RECALL_STOPWORDS and STOPWORDS < SENTENCE_STOPWORDS
    assert STOPWORDS == RECALL_STOPWORDS & SENTENCE_STOPWORDS
    assert (len(RECALL_STOPWORDS), len(SENTENCE_STOPWORDS), len(STOPWORDS)) == (213, 105, 89)


def test_one_reader_of_a_message_text():
    call = {
        "role": "assistant",
        "content": [{"type": "text", "text": "booking"}, {"text": "untyped"}, {"type": "image"}],
        "tool_calls": [{"function": {"name": "book", "arguments": '{"n":2}'}}],
    }
    assert content_texts(call["content"]) == ["booking", "untyped"]
    assert content_texts(call["content"], typed=True) == ["booking"]
    assert message_text(call) == 'booking\nuntyped\nbook({"n":2})'  # what is archived
    assert spoken_text(call) == "booking\nuntyped"  # what recall reads: no tool calls
    assert message_texts(call) == ["booking", 'book{"n":2}']  # what is counted
    assert spoken_text("not a message") == "" and message_text(7) == "7"


def test_one_token_estimate():
    # 'abcde' was 1 token for the default counter and 2 for recall's block
    assert estimate_text_tokens("abcde") == 1 == count_text(EstimateTokenCounter(), "abcde")
    snippets = [
        Snippet("c1", i, 2, 1.0, "user", f"The hotel number {i} is near the old river {i}.", 1.0, i)
        for i in range(12)
    ]

    def counted(text: str) -> int:
        return count_text(EstimateTokenCounter(), text)

    for budget in range(40, 260, 3):
        kwargs = {"query": "hotel river", "call_id": "c1", "max_tokens": budget}
        default = render_recall(snippets, max_snippet_tokens=30, **kwargs)
        assert default == render_recall(snippets, max_snippet_tokens=30, count=counted, **kwargs)
        if default is not None:
            assert counted(recall_message(default)["content"]) <= budget


def test_an_archived_message_fields_are_declared_once():
    names = [f.name for f in dataclasses.fields(ArchivedText)]
    assert names == ["call_id", "position", "turn", "at", "role", "content"]
    for cls in (SearchHit, SemanticHit, Snippet):
        assert issubclass(cls, ArchivedText)
        assert [f.name for f in dataclasses.fields(cls)][:6] == names
    snippet = Snippet("c1", 0, 2, 1.0, "user", "Rex is my dog", 1.0, 0, "assistant", "Hi Rex")
    assert snippet.text == snippet.content and snippet.full_text == "Rex is my dog\nHi Rex"
