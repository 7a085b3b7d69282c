"""The judge's answers, read strictly; the swap rule, order by order; the feedback it words."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agentkit.judge_state import OrderVerdict
from agentkit.rubric import build_rubric
from nodes.judge import (
    PairwiseVerdict,
    PostScore,
    combine_orders,
    feedback_entry,
    pairwise_messages,
    read_answer,
)


def structured(parsed: Any = None, raw: Any = None, error: Any = None) -> dict[str, Any]:
    """What `with_structured_output(include_raw=True)` returns."""
    return {"parsed": parsed, "raw": raw or AIMessage(content=""), "parsing_error": error}


@pytest.mark.parametrize(
    ("parsed", "winner"),
    [
        ({"winner": "1", "reasons": "r"}, "1"),
        ({"winner": 2, "reasons": "r"}, "2"),
        ({"winner": " TIE ", "reasons": "r"}, "tie"),
        ({"winner": "Tie", "reasons": " r "}, "tie"),
    ],
)
def test_a_winner_is_read_leniently_where_it_is_unambiguous(parsed: Any, winner: str) -> None:
    answer, problem = read_answer(PairwiseVerdict, structured(parsed))
    assert problem is None and answer is not None
    assert answer.winner == winner and answer.reasons == "r"


def test_long_reasons_are_cut_not_thrown_away() -> None:
    answer, _ = read_answer(PairwiseVerdict, structured({"winner": "1", "reasons": "长" * 5000}))
    assert answer is not None and len(answer.reasons) == 2000


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        (structured({"winner": "3", "reasons": "r"}), "invalid answer: winner"),
        (structured({"winner": "A", "reasons": "r"}), "invalid answer: winner"),
        (structured({"winner": 1.0, "reasons": "r"}), "invalid answer: winner"),
        (structured({"winner": True, "reasons": "r"}), "invalid answer: winner"),
        (structured({"winner": None, "reasons": "r"}), "invalid answer: winner"),
        (structured({"winner": ["1"], "reasons": "r"}), "invalid answer: winner"),
        (structured({"reasons": "r"}), "invalid answer: winner"),
        (structured({"winner": "1"}), "invalid answer: reasons"),
        (structured({"winner": "1", "reasons": ""}), "invalid answer: reasons"),
        (structured({"winner": "1", "reasons": 42}), "invalid answer: reasons"),
        (structured(error=ValueError("bad json")), "malformed PairwiseVerdict call"),
        (
            structured(
                raw=AIMessage(
                    content="",
                    invalid_tool_calls=[
                        {"name": "PairwiseVerdict", "args": "{", "id": "c", "error": "x"}
                    ],
                )
            ),
            "malformed PairwiseVerdict call",
        ),
        (structured(raw=AIMessage(content="")), "empty answer"),
        (structured(raw=AIMessage(content="   ")), "empty answer"),
        (structured(raw=AIMessage(content="抱歉，我无法比较。")), "refused in prose"),
        (structured(raw=AIMessage(content="I cannot judge posts.")), "refused in prose"),
        (structured(raw=AIMessage(content="帖子1更好")), "answered in prose"),
        ("not a mapping", "no PairwiseVerdict call"),
    ],
)
def test_junk_is_unusable_and_the_reason_echoes_no_answer_text(result: Any, problem: str) -> None:
    answer, found = read_answer(PairwiseVerdict, result)
    assert answer is None
    assert found is not None and found.startswith(problem)
    assert "帖子1更好" not in found and "bad json" not in found


@pytest.mark.parametrize(
    ("parsed", "problem"),
    [
        ({"score": "high", "reasons": "r"}, "invalid answer: score"),
        ({"score": -0.5, "reasons": "r"}, "invalid answer: score"),
        ({"score": 101, "reasons": "r"}, "invalid answer: score"),
        ({"score": False, "reasons": "r"}, "invalid answer: score"),
        ({"score": None, "reasons": "r"}, "invalid answer: score"),
        ({"score": 0.5, "reasons": " "}, "invalid answer: reasons"),
    ],
)
def test_a_junk_score_is_unusable(parsed: Any, problem: str) -> None:
    answer, found = read_answer(PostScore, structured(parsed))
    assert answer is None and found is not None and found.startswith(problem)


def verdict(order: str, answer: str | None) -> OrderVerdict:
    return OrderVerdict(
        order=order,  # type: ignore[typeddict-item]
        status="ok" if answer is not None else "unavailable",
        answer=answer,  # type: ignore[typeddict-item]
        preferred=None,
        reasons="r" if answer is not None else "",
        attempts=1,
        problems=[],
    )


@pytest.mark.parametrize(
    ("ab", "ba", "winner", "agreed", "unavailable"),
    [
        ("1", "2", "a", True, False),  # a both times
        ("2", "1", "b", True, False),  # b both times
        ("1", "1", "tie", False, False),  # position bias: first shown
        ("2", "2", "tie", False, False),  # position bias: second shown
        ("tie", "tie", "tie", True, False),
        ("1", "tie", "tie", False, False),
        ("tie", "1", "tie", False, False),
        ("1", None, "tie", False, True),
        (None, "2", "tie", False, True),
        (None, None, "tie", False, True),
    ],
)
def test_a_pair_has_a_winner_only_when_both_orders_agree(
    ab: str | None, ba: str | None, winner: str, agreed: bool, unavailable: bool
) -> None:
    decided = combine_orders([verdict("ba", ba), verdict("ab", ab)])  # any arrival order
    assert (decided["winner"], decided["agreed"], decided["unavailable"]) == (
        winner,
        agreed,
        unavailable,
    )
    assert [o["order"] for o in decided["orders"]] == ["ab", "ba"]


def test_the_orders_map_back_to_the_posts() -> None:
    decided = combine_orders([verdict("ab", "2"), verdict("ba", "2")])
    assert [o["preferred"] for o in decided["orders"]] == ["b", "a"]


@pytest.mark.parametrize(
    "orders",
    [[], [verdict("ab", "1")], [verdict("ab", "1"), verdict("ab", "2")], [verdict("ab", "1")] * 3],
)
def test_a_pair_needs_exactly_one_verdict_per_order(orders: list[OrderVerdict]) -> None:
    with pytest.raises(ValueError, match="one verdict per order"):
        combine_orders(orders)


def test_the_feedback_entry_says_pass_or_fail_and_fits_the_feedback_api() -> None:
    entry = feedback_entry(0.65, False, 0.7, "理由" * 3000)
    assert entry["key"] == "judge" and entry["score"] == 0.65
    assert entry["comment"].startswith("fail (threshold 0.7): 理由")
    assert len(entry["comment"]) == 4000


def test_the_order_prompt_asks_again_with_the_last_problem() -> None:
    rubric = build_rubric(platform="weibo").model_dump(mode="json")
    state: Any = {
        "order": "ab",
        "brief": {"request": "写微博", "audience": None},
        "rubric": rubric,
        "post_1": "一",
        "post_2": "二",
        "problems": ["empty answer", "invalid answer: winner: Input should be '1', '2' or 'tie'"],
    }
    system, human = pairwise_messages(state)
    assert "微博" in str(human.content) and "weibo" in str(system.content)
    assert str(human.content).endswith(
        "上一次的回答无效（invalid answer: winner: Input should be '1', '2' or 'tie'）。"
        "请只调用 PairwiseVerdict 工具，按要求填写每一项。"
    )
    assert '"audience"' not in str(human.content)  # empty brief fields are left out
