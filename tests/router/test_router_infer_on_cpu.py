"""Router inference (`python -m verl.router.infer`) on a fake checkpoint built from the tiny preset: the greedy route
follows the head's bias, the JSONL rows are complete, and the prompt used for generation is the training rewrite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.router import ROUTE_NAMES, RouterAction
from verl.router.controller import RouterController
from verl.router.families import TOOLS_HEADER, row_tool_families, system_text_of
from verl.router.head import RouterHead
from verl.router.checkpoint import resolve_checkpoint
from verl.router.infer import RouterInference, load_prompt_rows, main, run_inference
from verl.router.rewrite import ANSWER_INSTRUCTION, ROUTING_HEADER, rewrite_messages, tokenize_prompts
from verl.trainer.config_utils import load_default_config
from verl.utils.model_presets import prepare_model

TEST_PARQUET = Path("/work/shared/data/rlla_4k/test.parquet")
N_ROWS = 3

pytestmark = pytest.mark.skipif(not TEST_PARQUET.is_file(), reason=f"{TEST_PARQUET} not available")


@pytest.fixture(scope="module")
def tiny_dir() -> str:
    return prepare_model("tiny")


@pytest.fixture(scope="module")
def prompts_parquet(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "three.parquet"
    pd.read_parquet(TEST_PARQUET).iloc[:N_ROWS].to_parquet(path)
    return path


def make_checkpoint(root: Path, tiny_dir: str, preferred: RouterAction, overrides: tuple = ()) -> Path:
    """``root/global_step_7`` as the trainer saves it, with a head whose bias strongly prefers ``preferred``."""
    step = root / "global_step_7"
    shutil.copytree(tiny_dir, step / "actor" / "huggingface")
    hidden = json.loads((step / "actor" / "huggingface" / "config.json").read_text())["hidden_size"]
    head = RouterHead(hidden)
    with torch.no_grad():
        head.net.bias[int(preferred)] = 12.0
    torch.save({"head": head.state_dict(), "optimizer": {}}, step / "actor" / "router_world_size_1_rank_0.pt")
    cfg = load_default_config(["router.enable=true", "data.max_prompt_length=2048", *overrides])
    OmegaConf.save(cfg, step / "config.yaml")
    return step


def test_cli_answer_route_writes_rows(tmp_path, tiny_dir, prompts_parquet, capsys):
    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.ANSWER)
    out = tmp_path / "out" / "routed.jsonl"
    assert (
        main(
            [
                "--checkpoint",
                str(step),
                "--prompts",
                str(prompts_parquet),
                "--output",
                str(out),
                "--max_new_tokens",
                "8",
                "--batch_size",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == N_ROWS
    expected_index = [int(e["index"]) for e in pd.read_parquet(prompts_parquet)["extra_info"]]
    assert [r["index"] for r in rows] == expected_index
    for r in rows:
        assert set(r) >= {"index", "route", "router_probs", "response", "tool_calls"}
        assert r["route"] == "ANSWER"
        assert list(r["router_probs"]) == list(ROUTE_NAMES)
        assert sum(r["router_probs"].values()) == pytest.approx(1.0, abs=1e-5)
        assert r["router_probs"]["ANSWER"] > 0.99
        assert isinstance(r["response"], str) and isinstance(r["tool_calls"], list)
    summary = json.loads(capsys.readouterr().out)
    assert summary["routes"] == {"ANSWER": N_ROWS, "SEARCH": 0, "CALCULATE": 0}
    assert summary["prompts"] == N_ROWS and summary["output_path"] == str(out)
    assert not list(out.parent.glob(".*tmp*"))  # atomic write left no temporary file


def _controller_tokens(engine: RouterInference, rows, probs: torch.Tensor) -> dict:
    """What ``RouterController.route`` (training, validate=True) feeds the rollout for the same router logits."""
    raw = np.empty(len(rows), dtype=object)
    raw[:] = [r.messages for r in rows]
    extra = np.empty(len(rows), dtype=object)
    extra[:] = [r.extra_info for r in rows]
    original = tokenize_prompts(engine.tokenizer, raw, engine.max_prompt_length, truncation=engine.truncation)
    batch = DataProto.from_dict(tensors=original, non_tensors={"raw_prompt": raw, "extra_info": extra})
    controller = RouterController(engine.router_cfg, engine.config.data, engine.tokenizer)
    controller.route(batch, probs.log(), validate=True)
    return batch.batch


@pytest.mark.parametrize("preferred", [RouterAction.ANSWER, RouterAction.SEARCH])
def test_generation_prompt_is_the_training_rewrite(tmp_path, tiny_dir, prompts_parquet, preferred):
    step = make_checkpoint(tmp_path, tiny_dir, preferred)
    engine = RouterInference(step / "actor", max_new_tokens=8, device="cpu")  # the actor/ subdir works too
    rows = load_prompt_rows(prompts_parquet)
    routed = engine.route([r.messages for r in rows], [r.extra_info for r in rows])
    assert routed.actions.tolist() == [int(preferred)] * N_ROWS
    assert torch.allclose(routed.probs.sum(-1), torch.ones(N_ROWS))
    for row, messages in zip(rows, routed.messages):
        families = row_tool_families(row.messages, row.extra_info)
        assert messages == rewrite_messages(
            row.messages, preferred, families, filter_tools=False, other_as=RouterAction.SEARCH
        )
        system = system_text_of(messages)
        if preferred == RouterAction.ANSWER:
            assert TOOLS_HEADER not in system and system.endswith(ANSWER_INSTRUCTION)
        else:
            assert TOOLS_HEADER in system and ROUTING_HEADER in system and ANSWER_INSTRUCTION not in system
    # token-for-token the prompt that training's controller builds for the same route
    trained = _controller_tokens(engine, rows, routed.probs)
    assert trained["router_action"].tolist() == routed.actions.tolist()
    for i in range(N_ROWS):
        ours = routed.tokens["input_ids"][i][routed.tokens["attention_mask"][i].bool()]
        theirs = trained["input_ids"][i][trained["attention_mask"][i].bool()]
        assert torch.equal(ours, theirs)
    responses = engine.generate(routed.tokens)
    assert len(responses) == N_ROWS and all(isinstance(r, str) for r in responses)


def test_search_route_from_jsonl_with_filter_tools(tmp_path, tiny_dir, prompts_parquet):
    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.SEARCH, overrides=("router.filter_tools=true",))
    src = pd.read_parquet(prompts_parquet)
    jsonl = tmp_path / "prompts.jsonl"  # no extra_info: index falls back to the row position
    jsonl.write_text("".join(json.dumps({"prompt": [dict(m) for m in p]}) + "\n" for p in src["prompt"]))
    out = tmp_path / "routed.jsonl"
    assert (
        main(
            [
                "--checkpoint",
                str(step),
                "--prompts",
                str(jsonl),
                "--output",
                str(out),
                "--max_new_tokens",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["route"] for r in rows] == ["SEARCH"] * N_ROWS
    assert [r["index"] for r in rows] == list(range(N_ROWS))
    assert all(r["router_probs"]["SEARCH"] > 0.99 for r in rows)


def test_checkpoint_errors_name_the_missing_piece(tmp_path, tiny_dir):
    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.ANSWER)
    assert resolve_checkpoint(step) == resolve_checkpoint(step / "actor")
    (step / "actor" / "router_world_size_1_rank_0.pt").unlink()
    with pytest.raises(FileNotFoundError, match="router_world_size_.*router.enable"):
        resolve_checkpoint(step)
    with pytest.raises(
        FileNotFoundError, match=r"a folder of checkpoints; give one of them, e.g. the newest, .*step_7"
    ):
        resolve_checkpoint(tmp_path)  # the experiment's folder instead of one checkpoint
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="huggingface"):
        resolve_checkpoint(tmp_path / "empty")


def test_prompt_file_errors_name_file_and_row(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}]}) + "\n" + json.dumps({"x": 1}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:line 2: missing key 'prompt'"):
        load_prompt_rows(bad)
    bad.write_text(json.dumps({"prompt": [{"role": "user", "content": ""}]}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:line 1: prompt\[0\]\.content"):
        load_prompt_rows(bad)


def test_fixed_routing_baselines_override_the_head(tmp_path, tiny_dir, prompts_parquet, capsys):
    """--routes answer|search|random:B replaces the learned head (here biased to ANSWER) on the same actor, and the
    rows carry the ground truth so `main_eval --generations` scores them."""
    from verl.router.infer import fixed_routes, parse_routes
    from verl.trainer.main_eval import evaluate_rows

    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.ANSWER)
    out = tmp_path / "always.jsonl"
    assert (
        main(
            [
                "--checkpoint",
                str(step),
                "--prompts",
                str(prompts_parquet),
                "--output",
                str(out),
                "--max_new_tokens",
                "4",
                "--device",
                "cpu",
                "--routes",
                "search",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["route"] for r in rows] == ["SEARCH"] * N_ROWS
    truths = [rm["ground_truth"] for rm in pd.read_parquet(prompts_parquet)["reward_model"]]
    assert [r["ground_truth"] for r in rows] == truths and all(r["data_source"] for r in rows)
    assert json.loads(capsys.readouterr().out)["route_policy"] == "search"
    summary = evaluate_rows(rows)  # scored like any generation file: the RLLA reward on every row
    assert summary["rows"] == N_ROWS and "rlla_reward" in summary
    # random:B draws a tool route with probability B from a seeded generator
    gen = torch.Generator().manual_seed(0)
    draws = fixed_routes(parse_routes("random:0.3"), 10_000, gen)
    assert set(draws.unique().tolist()) == {int(RouterAction.ANSWER), int(RouterAction.SEARCH)}
    assert float((draws == int(RouterAction.SEARCH)).float().mean()) == pytest.approx(0.3, abs=0.02)
    assert fixed_routes(parse_routes("learned"), 3, gen) is None
    for bad in ("always", "random", "random:1.5", "answer:1"):
        with pytest.raises(ValueError, match="--routes"):
            parse_routes(bad)


def test_answer_routes_cannot_call_tools_when_the_checkpoint_says_so(tmp_path, tiny_dir, prompts_parquet):
    """A checkpoint trained with ``router.answer_forbids_tool_calls`` keeps the constraint at inference: the ANSWER
    rows reach the rollout flagged, the others not (an older checkpoint without the key: nothing flagged)."""
    from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

    rows = load_prompt_rows(prompts_parquet)
    for forbid in (True, False):
        root = tmp_path / str(forbid)
        step = make_checkpoint(
            root, tiny_dir, RouterAction.ANSWER, overrides=(f"router.answer_forbids_tool_calls={str(forbid).lower()}",)
        )
        engine = RouterInference(step, max_new_tokens=4, device="cpu", routes="random:0.5", seed=1)
        seen = []
        original = engine.rollout.generate_sequences
        engine.rollout.generate_sequences = lambda data: (
            seen.append(data.batch.get(FORBID_TOOL_CALLS)) or original(data)
        )
        out = engine.run(rows, batch_size=N_ROWS)
        routes = [r["route"] for r in out]
        assert len(set(routes)) == 2  # both routes drawn at rate 0.5 with this seed
        if forbid:
            assert seen[0].tolist() == [route == "ANSWER" for route in routes]
        else:
            assert seen[0] is None


def test_filter_overlong_prompts_drops_and_counts_them(tmp_path, tiny_dir, prompts_parquet, capsys):
    """``--filter_overlong_prompts``: rows longer than the checkpoint's data.max_prompt_length are dropped (as the
    trainer's data.filter_overlong_prompts) and counted; without it they go through data.truncation."""
    from verl.router.infer import run_inference
    from verl.utils.dataset.rl_dataset import PromptTooLongError

    probe = RouterInference(
        make_checkpoint(tmp_path / "probe", tiny_dir, RouterAction.ANSWER), max_new_tokens=4, device="cpu"
    )
    lengths = [probe.prompt_length(r.messages) for r in load_prompt_rows(prompts_parquet)]
    limit = sorted(lengths)[1]  # keeps the rows at most as long as the second shortest
    assert len(set(lengths)) == N_ROWS  # (the three rows differ in length)
    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.ANSWER, (f"data.max_prompt_length={limit}",))
    out = tmp_path / "kept.jsonl"
    summary = run_inference(step, prompts_parquet, out, max_new_tokens=4, device="cpu", filter_overlong_prompts=True)
    assert summary["prompts"] == 2 and summary["filtered_overlong"] == 1
    kept = [json.loads(line)["row"] for line in out.read_text().splitlines()]
    assert len(kept) == 2
    assert [lengths[r] <= limit for r in range(N_ROWS)].count(True) == 2 and all(lengths[r] <= limit for r in kept)
    truncated = run_inference(step, prompts_parquet, tmp_path / "all.jsonl", max_new_tokens=4, device="cpu")
    assert truncated["prompts"] == N_ROWS and truncated["filtered_overlong"] == 0  # data.truncation applies
    strict = make_checkpoint(
        tmp_path / "strict", tiny_dir, RouterAction.ANSWER, (f"data.max_prompt_length={limit}", "data.truncation=error")
    )
    with pytest.raises(PromptTooLongError, match=r"rows 0\.\.2"):
        run_inference(strict, prompts_parquet, tmp_path / "strict.jsonl", max_new_tokens=4, device="cpu")


def test_a_checkpoint_config_with_retired_keys_still_loads(tmp_path, tiny_dir):
    """Configs saved before ``compute_dtype`` was retired (the bf16 policy replaced autocast) load; the key is gone."""
    from verl.router.checkpoint import load_checkpoint_config

    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.ANSWER)
    saved = OmegaConf.load(step / "config.yaml")
    saved.actor_rollout_ref.actor.compute_dtype = None
    saved.critic.compute_dtype = None
    OmegaConf.save(saved, step / "config.yaml")
    loaded = load_checkpoint_config(step / "config.yaml")
    assert "compute_dtype" not in loaded.actor_rollout_ref.actor and "compute_dtype" not in loaded.critic
    saved.actor_rollout_ref.actor.compute_dtyp = None  # a key that never existed is still refused, named
    OmegaConf.save(saved, step / "config.yaml")
    with pytest.raises(ValueError, match="compute_dtyp"):
        load_checkpoint_config(step / "config.yaml")


def test_value_mode_checkpoint_routes_with_the_runs_price(tmp_path, tiny_dir, prompts_parquet):
    """router.loss_mode=value: the head's output is a value, not the policy; inference prices it as training did with
    data.pt's λ and route means — a head that values SEARCH 12 points above ANSWER answers once λ·c̄ exceeds that."""
    from verl.router.controller import RouterController as Controller
    from verl.router.value import reprice_probs
    from verl.trainer.config_utils import default_section

    overrides = (
        "router.loss_mode=value",
        "router.route_sampling=stratified",
        "router.entropy_coeff=0",
        "router.sup_coeff=0",
        "router.value_temperature=2.0",
    )
    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.SEARCH, overrides=overrides)
    with pytest.raises(FileNotFoundError, match="data.pt"):
        RouterInference(step, max_new_tokens=4, device="cpu")
    rows = load_prompt_rows(prompts_parquet)
    for lam, expected in ((20.0, "ANSWER"), (5.0, "SEARCH")):
        controller = Controller(
            default_section("router", loss_mode="value", route_sampling="stratified", lambda_init=lam, lambda_max=30.0),
            default_section("data"),
            None,
        )
        controller.route_values.cost[:] = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
        torch.save({"router": controller.state_dict()}, step / "data.pt")
        engine = RouterInference(step, max_new_tokens=4, device="cpu")
        routed = engine.route([r.messages for r in rows])
        assert [ROUTE_NAMES[int(a)] for a in routed.actions] == [expected] * N_ROWS
        # the reported probabilities are the priced policy's: softmax((h − λ·c̄)/τ) with h = (0, 12, 0), b = 0
        logits = torch.tensor([0.0, 12.0 - lam, -lam]) / 2.0
        torch.testing.assert_close(routed.probs[0], torch.softmax(logits, -1), atol=1e-5, rtol=0)
    # --fixed_lambda: the same head at another price (data.pt says λ = 20, priced at 5 instead: SEARCH)
    controller.lagrange.value = 20.0
    torch.save({"router": controller.state_dict()}, step / "data.pt")
    engine = RouterInference(step, max_new_tokens=4, device="cpu", fixed_lambda=5.0)
    assert [ROUTE_NAMES[int(a)] for a in engine.route([r.messages for r in rows]).actions] == ["SEARCH"] * N_ROWS
    # each output row records the price of its router_probs; repriced offline to data.pt's λ = 20 they are the
    # probabilities the head gives at 20 (reprice_probs: no forward pass)
    out = engine.run(rows[:2])
    assert [r["router_lambda"] for r in out] == [5.0, 5.0]
    recorded = torch.tensor([[r["router_probs"][a] for a in ROUTE_NAMES] for r in out])
    at_20 = reprice_probs(recorded, torch.tensor([0.0, 1.0, 1.0]), 5.0, 20.0, 2.0)
    torch.testing.assert_close(
        at_20[0], torch.softmax(torch.tensor([0.0, -8.0, -20.0], dtype=torch.float64) / 2, -1), atol=1e-6, rtol=0
    )
    # --target_cost: the smallest price at which the greedy routes spend at most the budget on these prompts. The
    # head's values are (0, 12, 0) on every prompt, c̄ = (0, 1, 1): SEARCH (cost 1) is the argmax below λ = 12 and
    # ANSWER (cost 0) from the tie at 12 on, so any budget below 1 needs λ = 12, whatever τ is
    summary = run_inference(
        step, prompts_parquet, tmp_path / "priced.jsonl", max_new_tokens=2, device="cpu", target_cost=0.5
    )
    assert summary["router_lambda"] == pytest.approx(12.0, rel=1e-5) and summary["router_lambda"] >= 12.0 - 1e-5
    assert summary["routes"] == {"ANSWER": N_ROWS, "SEARCH": 0, "CALCULATE": 0}
    priced = [json.loads(line) for line in (tmp_path / "priced.jsonl").read_text().splitlines()]
    assert all(r["router_lambda"] == summary["router_lambda"] and r["route"] == "ANSWER" for r in priced)
    # the recorded probabilities are the policy's at that price: softmax((0, 12 − λ, −λ)/τ)
    lam = summary["router_lambda"]
    want = torch.softmax(torch.tensor([0.0, 12.0 - lam, -lam], dtype=torch.float64) / 2.0, -1)
    assert [priced[0]["router_probs"][a] for a in ROUTE_NAMES] == pytest.approx(want.tolist(), abs=1e-5)
    assert (
        run_inference(step, prompts_parquet, tmp_path / "slack.jsonl", max_new_tokens=2, device="cpu", target_cost=1.0)[
            "router_lambda"
        ]
        == 0.0
    )  # spends at most 1 unpriced: λ = 0
    with pytest.raises(ValueError, match="both set the price"):
        run_inference(step, prompts_parquet, tmp_path / "x.jsonl", fixed_lambda=1.0, target_cost=0.5)
    with pytest.raises(ValueError, match="finite number >= 0"):
        run_inference(step, prompts_parquet, tmp_path / "x.jsonl", target_cost=float("nan"))
    with pytest.raises(ValueError, match="loss_mode=pg"):
        RouterInference(make_checkpoint(tmp_path / "pg", tiny_dir, RouterAction.SEARCH), device="cpu", fixed_lambda=1.0)
    with pytest.raises(ValueError, match="--target_cost prices a router.loss_mode=value head"):
        run_inference(tmp_path / "pg" / "global_step_7", prompts_parquet, tmp_path / "x.jsonl", target_cost=0.5)


def test_bfcl_rows_keep_their_ids_for_bfcls_checker(tmp_path, tiny_dir):
    """A BFCL prompt file (write_bfcl_parquet) routed and generated: each output row carries its bfcl_id and
    bfcl_category, so BFCL's own checker scores the file (the ANSWER route cannot call: right on irrelevance only)."""
    from verl.trainer.eval_bfcl import evaluate_bfcl_rows
    from verl.utils.dataset.bfcl import bfcl_fields, load_category, write_bfcl_parquet

    prompts = write_bfcl_parquet(tmp_path / "bfcl.parquet", "simple_python,irrelevance", max_rows=1)
    step = make_checkpoint(tmp_path, tiny_dir, RouterAction.ANSWER, ("router.answer_forbids_tool_calls=true",))
    out = tmp_path / "answer.jsonl"
    assert (
        main(
            [
                "--checkpoint",
                str(step),
                "--prompts",
                str(prompts),
                "--output",
                str(out),
                "--max_new_tokens",
                "4",
                "--device",
                "cpu",
                "--routes",
                "answer",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [load_category(c, max_rows=1)[0]["id"] for c in ("simple_python", "irrelevance")]
    assert [(r["bfcl_id"], r["bfcl_category"]) for r in rows] == list(zip(ids, ("simple_python", "irrelevance")))
    summary = evaluate_bfcl_rows(rows)
    assert summary["categories"]["irrelevance"]["accuracy"] == 1.0
    assert summary["categories"]["simple_python"]["accuracy"] == 0.0
    assert bfcl_fields(None) == {} and bfcl_fields({"index": 3}) == {}  # rows that are not BFCL's carry nothing


CALCULATOR = "agent_system.tools.builtin:calculator"


@pytest.mark.parametrize(
    "preferred, ran",
    [(RouterAction.CALCULATE, True), (RouterAction.SEARCH, False), (RouterAction.ANSWER, False)],
)
def test_tools_that_run_each_route_offers_its_family(tmp_path, tiny_dir, prompts_parquet, preferred, ran):
    """With ``--tools``, each prompt plays an episode of the executing loop: a CALCULATE route runs the calculator
    (its result comes back as a tool turn), a SEARCH route does not offer it (the call fails without running), an
    ANSWER route under ``answer_forbids_tool_calls`` offers nothing and asks the rollout to forbid calls."""
    from scripted_rounds import ScriptedRounds
    from verl.utils.reward_score import tool_formats
    from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

    step = make_checkpoint(tmp_path, tiny_dir, preferred, ("router.answer_forbids_tool_calls=true",))
    engine = RouterInference(step, max_new_tokens=300, device="cpu", tools=[CALCULATOR], tool_sandbox="none")
    call = tool_formats.render_calls([{"name": "calculator", "parameters": {"expression": "6 * 7"}}], "toolrl")
    rounds = ScriptedRounds(engine.tokenizer, [call, "<response> 42 </response>"])
    engine.rollout.generate_sequences = rounds
    rows = load_prompt_rows(prompts_parquet)[:2]
    try:
        out = engine.run(rows, batch_size=2)
    finally:
        engine.multi_turn.close()
    routed = engine.route([r.messages for r in rows], [r.extra_info for r in rows])
    assert rounds.prompts[0] == [
        ids[m.bool()].tolist() for ids, m in zip(routed.tokens["input_ids"], routed.tokens["attention_mask"])
    ]  # the route's rewritten prompt, as a single generation would see it
    forbid = (
        rounds.batches[0].batch[FORBID_TOOL_CALLS].tolist()
        if FORBID_TOOL_CALLS in rounds.batches[0].batch.keys()
        else None
    )
    assert forbid == ([True, True] if preferred == RouterAction.ANSWER else None)
    for r in out:
        assert r["route"] == ROUTE_NAMES[int(preferred)]
        assert r["offered_tools"] == (["calculator"] if ran else [])
        assert (
            r["num_turns"] == 2 and r["stop_reason"] == "answer" and r["answer"].strip() == "<response> 42 </response>"
        )
        (result,) = r["tool_results"]
        assert result["ok"] is ran
        assert ("42" == result["content"].strip()) if ran else ("not offered" in result["content"])
        assert "42" in r["response"] and r["tool_calls"] == [
            {"name": "calculator", "parameters": {"expression": "6 * 7"}}
        ]
