"""The RLVCR rollout phase (``rlvcr/rollout_phase.py``, spec ``rlvcr.md`` §Per step 1-4) on CPU with the tiny model.

Original responses are scripted (the untrained tiny model never writes the level format); everything else is real:
RLLA prompts from the dataset, the actor worker's ``compute_log_prob`` and, inside ``fit()``, the rollout worker's
generation of the alternative thinks.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import agent_e2e_overrides, e2e_overrides
from rlvcr.core_rlvcr import RLVCRSettings
from rlvcr.rollout_phase import PHASE_FIELDS, RLVCRPhase, insert_instruction, level_format
from verl.protocol import DataProto
from verl.workers.rollout.base import assemble_rollout_output

RLLA_TAGS = "algorithm.rlvcr.action_tags=[tool_call,response]"
ONE_STEP = [
    "trainer.val_before_train=False",
    "trainer.total_training_steps=1",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "data.max_response_length=48",
    "algorithm.adv_estimator=rlvcr",
    "algorithm.rlvcr.alt_max_think_tokens=6",
]
RLLA_TEXTS = [
    '<level>2</level><think>Look it up.</think>\n<tool_call>\n{"name": "a", "parameters": {}}\n</tool_call>',
    "no level here",
    "<level>1</level><think></think>\n<response>Done.</response>",
    "<level>4</level><think>Plan: goal, state, moves.</think>\n<response>Ok</response>",
]
AGENT_TEXTS = [
    "<level>2</level><think>go right</think><action>right</action>",
    "right",
    "<level>1</level><action>left</action>",
    "<level>3</level><think>the goal is left</think><action>left</action>",
]
N_ALTERNATIVES = {1: 3, 2: 2, 3: 2, 4: 2}  # levels L != l with L > 1


def _rlla_phase(tokenizer):
    settings = RLVCRSettings.from_config({"action_tags": ["tool_call", "response"], "alt_max_think_tokens": 6})
    return RLVCRPhase(tokenizer, settings, level_format(settings, rlla=True))


def _responses(tokenizer, texts, width):
    """``[len(texts), width]`` ids of each text + EOS, right-padded."""
    out = torch.full((len(texts), width), tokenizer.pad_token_id, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


def _generated(prompts: DataProto, tokenizer, texts, width=48) -> DataProto:
    """What the rollout returns for ``prompts`` had it sampled ``texts`` (cycled over the rows)."""
    rows = [texts[i % len(texts)] for i in range(len(prompts))]
    return assemble_rollout_output(
        prompts, _responses(tokenizer, rows, width), width, tokenizer.eos_token_id, tokenizer.pad_token_id
    )


@pytest.fixture(scope="module")
def rlla_trainer(tmp_path_factory, small_rlla):
    from verl.trainer.main_ppo import build_local_trainer

    tmp = tmp_path_factory.mktemp("rlvcr_phase")
    trainer = build_local_trainer(e2e_overrides(tmp, small_rlla) + ONE_STEP + [RLLA_TAGS])
    yield trainer
    trainer.shutdown()


@pytest.fixture(scope="module")
def rlla_batch(rlla_trainer):
    """Two real RLLA prompts (level guide in the system prompt) with the scripted responses, as after ``gen``."""
    from verl.utils.dataset.rl_dataset import collate_fn

    tok = rlla_trainer.tokenizer
    items = collate_fn([rlla_trainer.train_dataset[i] for i in range(2)])
    prompts = DataProto.from_single_dict({k: items[k] for k in ("input_ids", "attention_mask", "position_ids")})
    batch = _generated(prompts.repeat(2, interleave=True), tok, RLLA_TEXTS)
    assert "Thinking Level" in tok.decode(batch.batch["prompts"][0])  # rlla_level_setup's template
    return batch


class _Recorder:
    """A ``generate_fn`` / ``log_prob_fn`` stand-in that records its inputs."""

    def __init__(self, fn):
        self.fn, self.inputs = fn, []

    def __call__(self, data):
        self.inputs.append(data)
        return self.fn(data)


def _think_generator(tokenizer, think="Check it.</think><action>x"):
    return _Recorder(lambda prompts: _generated(prompts, tokenizer, [think], width=12))


def _action_ids(tokenizer, text, tag):
    content = text.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]
    return tokenizer.encode(content, add_special_tokens=False)


def test_contexts_from_a_real_batch_score_the_same_action_ids(rlla_trainer, rlla_batch):
    tok = rlla_trainer.tokenizer
    phase = _rlla_phase(tok)
    batch = DataProto.from_dict({k: v.clone() for k, v in rlla_batch.batch.items()})
    scorer = _Recorder(rlla_trainer.actor_rollout_wg.compute_log_prob)
    phase(batch, _think_generator(tok), scorer)
    (scored,) = scorer.inputs
    parseable = [t for t in RLLA_TEXTS if t.startswith("<level>")]
    assert len(scored) == 4 * len(parseable)  # one context per level, unparseable rows left out
    ids, mask = scored.batch["responses"], scored.batch["response_mask"].bool()
    for k, text in enumerate(parseable):
        tag = "tool_call" if "<tool_call>" in text else "response"
        expected = _action_ids(tok, text, tag)
        for level in range(1, 5):
            row = 4 * k + level - 1
            assert ids[row][mask[row]].tolist() == expected  # the ORIGINAL action ids, identical for every L
            context = tok.decode(scored.batch["input_ids"][row][scored.batch["attention_mask"][row].bool()])
            history, response_side = context.rsplit("<|im_start|>assistant\n", 1)
            think = "" if level == 1 else "Check it."  # the stub's alternative think
            if level == int(text[7]):  # the original context: exactly what was sampled
                want = text[: text.index(f"<{tag}>") + len(tag) + 2]
            else:
                want = f"<level>{level}</level><think>{think}</think>\n<{tag}>"
            assert response_side == want + tok.decode(expected)
            assert "Thinking Level" in history and "Think at level" not in history  # no instruction when scoring


def test_level_entropy_matches_the_model_logits(rlla_trainer, rlla_batch):
    tok = rlla_trainer.tokenizer
    phase = _rlla_phase(tok)
    batch = DataProto.from_dict({k: v.clone() for k, v in rlla_batch.batch.items()})
    phase(batch, _think_generator(tok), rlla_trainer.actor_rollout_wg.compute_log_prob)
    entropy, cost = (
        batch.non_tensor_batch["thinking_level_action_entropy"],
        batch.non_tensor_batch["thinking_level_think_cost"],
    )
    model = rlla_trainer.actor_rollout_wg.worker.actor_module
    prompt_len = batch.batch["prompts"].shape[1]
    checked = 0
    for i in np.flatnonzero(batch.non_tensor_batch["thinking_evaluated"]):
        history = batch.batch["prompts"][i][batch.batch["attention_mask"][i, :prompt_len].bool()].tolist()
        response = batch.batch["responses"][i][batch.batch["response_mask"][i].bool()].tolist()
        step, level = phase.parse_row(history, response, int(i))
        assert level == batch.non_tensor_batch["thinking_level"][i]
        contexts, costs = phase.level_contexts(step, {L: "Check it." for L in range(2, 5)})
        assert costs == list(cost[i]) and costs[0] == 0.0
        for L, context in enumerate(contexts):
            ids = torch.tensor([context + step.action])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(context) - 1 : -1].double()  # predict the action tokens
            direct = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1).mean().item()
            assert entropy[i, L] == pytest.approx(direct, abs=1e-4)
            checked += 1
    assert checked == 4 * 3


def test_unparseable_rows_are_not_evaluated_and_get_no_alternatives(rlla_trainer, rlla_batch):
    tok = rlla_trainer.tokenizer
    phase = _rlla_phase(tok)
    fake_scores = _Recorder(lambda d: DataProto.from_dict({"entropys": torch.ones(d.batch["responses"].shape)}))
    batch = DataProto.from_dict({k: v.clone() for k, v in rlla_batch.batch.items()})
    generator = _think_generator(tok)
    metrics = phase(batch, generator, fake_scores)
    nt = batch.non_tensor_batch
    assert set(PHASE_FIELDS) <= set(nt)
    expected_levels = [int(t[7]) if t.startswith("<level>") else 0 for t in RLLA_TEXTS]
    assert nt["thinking_level"].tolist() == expected_levels
    assert nt["thinking_evaluated"].tolist() == [lv > 0 for lv in expected_levels]
    assert np.isnan(nt["thinking_level_action_entropy"][1]).all() and np.isnan(nt["thinking_level_think_cost"][1]).all()
    (prompts,) = generator.inputs  # ONE generate call for all alternatives
    assert len(prompts) == sum(N_ALTERNATIVES[lv] for lv in expected_levels if lv) == metrics["rlvcr/alternatives"]
    assert prompts.meta_info == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 6, "stop": ["</think>"]}
    first = tok.decode(prompts.batch["input_ids"][0][prompts.batch["attention_mask"][0].bool()])
    assert "Think at level 3" in first and first.endswith("<|im_start|>assistant\n<level>3</level><think>")
    assert metrics["rlvcr/evaluated_frac"] == 0.75 and metrics["rlvcr/timing_s"] >= 0
    assert metrics["rlvcr/alt_unclosed_frac"] == 0.0 and metrics["rlvcr/alt_empty_frac"] == 0.0
    # a model that ends every alternative at once: empty thinks (not cut by the budget), counted as such
    batch = DataProto.from_dict({k: v.clone() for k, v in rlla_batch.batch.items()})
    metrics = phase(batch, _think_generator(tok, think="</think>"), fake_scores)
    assert metrics["rlvcr/alt_empty_frac"] == 1.0 and metrics["rlvcr/alt_unclosed_frac"] == 0.0

    none = DataProto.from_dict({k: v.clone() for k, v in rlla_batch.batch.items()})
    none.batch["responses"] = _responses(tok, ["no level"] * 4, 48)
    none.batch["response_mask"] = (none.batch["responses"] != tok.pad_token_id).long()
    generator, fake_scores.inputs = _think_generator(tok), []
    metrics = phase(none, generator, fake_scores)
    assert not generator.inputs and not fake_scores.inputs and metrics["rlvcr/alternatives"] == 0
    assert none.non_tensor_batch["thinking_level"].tolist() == [0] * 4


def test_only_positive_episodes_and_token_alignment(tokenizer):
    settings = RLVCRSettings.from_config({"only_positive_episodes": True})
    phase = RLVCRPhase(tokenizer, settings, level_format(settings, rlla=False))
    # a token carrying the end of the opening tag and the start of the action: '>"'
    head = tokenizer.encode("<level>2</level><think>go</think><action", add_special_tokens=False)
    action = [tokenizer.convert_tokens_to_ids('>"')] + tokenizer.encode('left"', add_special_tokens=False)
    response = head + action + tokenizer.encode("</action>", add_special_tokens=False)
    step, level = phase.parse_row([1, 2], response)
    assert level == 2 and step.tag_tail == ">" and step.action == action and step.head == head
    contexts, _ = phase.level_contexts(step, {3: "a", 4: "b"})
    for L, context in enumerate(contexts, start=1):
        assert tokenizer.decode(context[2:] + step.action).endswith('<action>"left"')
    assert insert_instruction([5, 6], [9], phase.markers) == [5, 6, 9]  # no chat template: appended

    prompts = DataProto.from_dict(
        {
            "input_ids": torch.ones(2, 3, dtype=torch.long),
            "attention_mask": torch.ones(2, 3, dtype=torch.long),
            "position_ids": torch.arange(3).repeat(2, 1),
        }
    )
    batch = _generated(prompts, tokenizer, AGENT_TEXTS[:1], width=24)
    batch.non_tensor_batch["episode_return"] = np.array([1.0, 0.0])
    scores = lambda d: DataProto.from_dict({"entropys": torch.ones(d.batch["responses"].shape)})  # noqa: E731
    phase(batch, _think_generator(tokenizer), scores)
    assert batch.non_tensor_batch["thinking_evaluated"].tolist() == [True, False]
    assert batch.non_tensor_batch["thinking_level"].tolist() == [2, 2]  # still counted for the diversity term


# ------------------------------------------------------------------------------------------------ inside fit()
def _script_rollout(trainer, texts):
    """Original rollouts return ``texts``; the RLVCR alternatives (``max_new_tokens`` set) are really generated."""
    worker = trainer.actor_rollout_wg.worker
    real = worker.rollout.generate_sequences
    calls = []

    def generate(prompts):
        calls.append(dict(prompts.meta_info))
        if prompts.meta_info.get("max_new_tokens"):
            return real(prompts)
        return _generated(prompts, trainer.tokenizer, texts, width=worker.rollout.response_length)

    worker.rollout.generate_sequences = generate
    return calls


def _check_step_metrics(run_dir, rows_expected=None):
    (record,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = [
        f"rlvcr/{name}_{k}"
        for name in ("level_frac", "action_entropy_level", "think_tokens_level")
        for k in range(1, 5)
    ] + [
        "rlvcr/unparseable_frac",
        "rlvcr/thinking_adv_abs_mean",
        "rlvcr/alternatives",
        "timing_s/rlvcr",
        "timing_s/step",
        "actor/pg_loss",
    ]
    for key in keys:
        assert key in record and math.isfinite(record[key]), key
    assert 0 < record["rlvcr/unparseable_frac"] < 1 and record["rlvcr/alternatives"] > 0
    assert 0 < record["timing_s/rlvcr"] < record["timing_s/step"]
    assert record["rlvcr/think_tokens_level_1"] == 0.0
    return record


def test_rlvcr_step_inside_fit_on_rlla_rows(tmp_path, small_rlla):
    from verl.trainer.main_ppo import build_local_trainer

    trainer = build_local_trainer(e2e_overrides(tmp_path, small_rlla) + ONE_STEP + [RLLA_TAGS])
    calls = _script_rollout(trainer, RLLA_TEXTS)
    trainer.fit()
    assert [bool(c.get("max_new_tokens")) for c in calls] == [False, True]  # rollout, then ONE alternatives call
    record = _check_step_metrics(tmp_path / "run")
    assert record["rlvcr/unparseable_frac"] == 0.25
    batch = trainer.last_batch
    assert len(batch) == 4  # 2 prompts x rollout.n=2: the alternatives are not training rows
    assert batch.non_tensor_batch["thinking_evaluated"].sum() == 3
    trainer.shutdown()


def test_rlvcr_step_inside_fit_on_line_world(tmp_path):
    from verl.trainer.main_ppo import build_local_trainer

    agent = [
        "data.train_files=null",
        "data.val_files=null",
        "data.max_prompt_length=512",
        "env.env_name=line_world",
        "env.max_steps=2",
        "env.train_tasks=8",
        "env.val_tasks=2",
        "env.num_workers=1",
        "env.use_ray_workers=false",
        "env.line_world.length=4",
    ]
    trainer = build_local_trainer(agent_e2e_overrides(tmp_path) + agent + ONE_STEP)
    calls = _script_rollout(trainer, AGENT_TEXTS)
    trainer.fit()
    assert sum(bool(c.get("max_new_tokens")) for c in calls) == 1  # after the episodes, one alternatives call
    _check_step_metrics(tmp_path / "run")
    batch = trainer.last_batch
    real = ~batch.non_tensor_batch["is_pad"]
    prompt = trainer.tokenizer.decode(batch.batch["prompts"][0])
    assert "Thinking Level" in prompt and "<action>" in prompt  # level-aware env prompt
    assert set(batch.non_tensor_batch["thinking_level"][real].tolist()) <= {0, 1, 2, 3}
    trainer.shutdown()
