"""The copy warm-up's sequences can only be continued by copying from their context, and the warm-up is a function of
its seed."""

from __future__ import annotations

import pytest

from verl.trainer.route_qa.copy_warmup import CopyWarmup, _Sequences, copy_warmup
from verl.utils.dataset.route_qa import write_task


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("route_qa_copy")
    write_task(out, train=30, val=3, test=6)
    return out / "corpus.jsonl"


def _find(seq: list[int], sub: list[int]) -> list[int]:
    return [i for i in range(len(seq) - len(sub) + 1) if seq[i : i + len(sub)] == sub]


def test_every_target_is_a_span_of_its_context_after_the_asked_key(corpus, tokenizer):
    data = _Sequences(tokenizer, corpus, seed=3)
    close = data.close
    seen = set()
    for _ in range(300):
        context, target = data.draw()
        assert target[-len(close) :] == close and context[-len(data.open) :] == data.open
        span = target[: -len(close)]
        assert 2 <= len(span) <= 18 and set(span) <= set(data.pool)
        before_open = context[: -len(data.open)]
        at = _find(before_open, span)
        assert at, "the answer is not in the context: it cannot be copied"
        delimited = any(  # the span sits between an opening delimiter and its closing one
            before_open[i - len(left) : i] == left and before_open[i + len(span) : i + len(span) + len(right)] == right
            for i in at
            for left, right in data.delimiters
        )
        asked = [k for k in data.keys if before_open[-len(k) :] == k]  # marked / recall: the span follows the key
        keyed = any(before_open[i - len(k) : i] == k for i in at for k in asked)
        repeat = 0 in at and before_open[len(span) :] == data.sep  # the span opens the context, " |" closes it
        assert repeat or delimited or keyed
        seen.add("repeat" if repeat else "delimited" if delimited else "key")
    assert seen == {"repeat", "delimited", "key"}


def test_the_warm_up_is_a_function_of_its_seed_and_schedule(corpus, tokenizer, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    settings = CopyWarmup(steps=4, batch_size=4, warmup_steps=2)
    runs = [
        copy_warmup(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tokenizer, corpus, settings) for _ in "ab"
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 4
    other = copy_warmup(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        tokenizer,
        corpus,
        CopyWarmup(steps=4, batch_size=4, warmup_steps=2, seed=1),
    )
    assert other != runs[0]
    assert settings.lr_at(0) == pytest.approx(5e-4) and settings.lr_at(1) == settings.lr_at(3) == pytest.approx(1e-3)


def test_digit_runs_are_drawn_and_every_target_id_is_in_the_restricted_vocabulary(corpus, tokenizer):
    data = _Sequences(tokenizer, corpus, seed=5)
    vocab, digit_targets = set(data.targets()), 0
    for _ in range(300):
        _, target = data.draw()
        assert set(target) <= vocab
        span = target[: -len(data.close)]
        digit_targets += set(span) <= set(data.digits) and len(span) >= 3
    assert 0.1 < digit_targets / 300 < 0.5  # DIGIT_SHARE of the spans (a target joins one or two)
    assert len(data.digits) == 10 and set(data.digits) <= set(data.pool)


def test_the_restricted_loss_is_the_softmax_over_the_target_ids(corpus, tokenizer, tiny_model_dir):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    settings = CopyWarmup(steps=1, batch_size=3, warmup_steps=1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    first = copy_warmup(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tokenizer, corpus, settings)[0]
    full = copy_warmup(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        tokenizer,
        corpus,
        CopyWarmup(steps=1, batch_size=3, warmup_steps=1, restricted_softmax=False),
    )[0]
    data = _Sequences(tokenizer, corpus, seed=0)  # the same draws as the run's first batch
    vocab = torch.tensor(data.targets())
    restricted_terms, whole_terms = [], []
    with torch.no_grad():
        for context, target in (data.draw() for _ in range(3)):
            logits = model(input_ids=torch.tensor([context + target])).logits[0, len(context) - 1 : -1]
            at, ids = torch.arange(len(target)), torch.tensor(target)
            restricted_terms.append(-F.log_softmax(logits[:, vocab], -1)[at, torch.searchsorted(vocab, ids)])
            whole_terms.append(-F.log_softmax(logits, -1)[at, ids])
    restricted = torch.cat(restricted_terms).mean().item()
    whole = torch.cat(whole_terms).mean().item()
    assert first == pytest.approx(restricted, rel=1e-4) and full == pytest.approx(whole, rel=1e-4)


def test_the_table_share_draws_one_digit_problems_answered_as_the_traces_answer(corpus, tokenizer):
    from verl.utils.dataset.route_qa import TEMPLATES, one_digit_problems

    plain, none = _Sequences(tokenizer, corpus, seed=7), _Sequences(tokenizer, corpus, seed=7, table_share=0.0)
    assert [plain.draw() for _ in range(50)] == [none.draw() for _ in range(50)]  # 0: the draws as without it
    questions = {t.format(q=p): a for p, a in one_digit_problems() for t in TEMPLATES["train"]}
    data = _Sequences(tokenizer, corpus, seed=7, table_share=0.5)
    vocab, table = set(data.targets()), 0
    for _ in range(400):
        context, target = data.draw()
        assert set(target) <= vocab  # the answers' ids are in the restricted vocabulary
        question = tokenizer.decode(context[: -len(data.open)])
        if question in questions:
            table += 1  # the answer after a space, as the traces write it: " 56"
            assert tokenizer.decode(target[: -len(data.close)]) == " " + questions[question]
    assert 0.4 < table / 400 < 0.6
    with pytest.raises(ValueError, match="table_share"):
        _Sequences(tokenizer, corpus, seed=7, table_share=1.0)
