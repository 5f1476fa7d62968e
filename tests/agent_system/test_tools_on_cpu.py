"""Typed tools, their sandbox and the MCP client: schemas from signatures, every failure an error observation."""

import os
import sys
import time
from pathlib import Path

import pytest

from agent_system.tools.base import ToolRegistry, ToolSpec, load_tools, render_output, tool
from agent_system.tools.builtin import SearchIndex, calculator, search_tool
from agent_system.tools.runner import ProcessToolRunner, ToolSandboxError, make_tool_runner

HERE = Path(__file__).parent
FIXTURES = f"{HERE / 'tool_fixtures.py'}:ALL"

CORPUS = [
    {"title": "Paris", "text": "Paris is the capital of France, on the Seine."},
    {"title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"title": "Seine", "text": "The Seine flows through Paris into the English Channel."},
    "A document without a title about volcanoes in Iceland.",
    {"title": "Madrid", "text": "Madrid lies on the Manzanares."},
    {"title": "Rome", "text": "Rome was founded, by legend, in 753 BC."},
]


def test_schema_comes_from_signature_and_docstring():
    @tool(family="calculate")
    def scale(value: float, factor: int = 2, unit: str | None = None) -> str:
        """Multiply a value.

        Args:
            value: the number to scale.
            factor: how many times.
            unit: an optional unit name.
        """
        return f"{value * factor}{unit or ''}"

    assert scale.schema() == {
        "type": "function",
        "function": {
            "name": "scale",
            "description": "Multiply a value.",
            "parameters": {
                "type": "object",
                "properties": {
                    "value": {"type": "number", "description": "the number to scale."},
                    "factor": {"type": "integer", "default": 2, "description": "how many times."},
                    "unit": {
                        "anyOf": [{"type": "string"}, {"type": "null"}],
                        "default": None,
                        "description": "an optional unit name.",
                    },
                },
                "required": ["value"],
                "additionalProperties": False,
            },
        },
    }
    assert scale(1.5, 3) == "4.5" and scale.family == "calculate"  # still the plain function
    ok = scale.invoke({"value": "2", "factor": 3})  # pydantic coerces "2"
    assert ok.ok and ok.content == "6.0"
    for arguments, fragment in [
        ({}, "argument 'value': Field required"),
        ({"value": 1, "factor": "many"}, "argument 'factor': Input should be a valid integer"),
        ({"value": 1, "speed": 3}, "argument 'speed': Extra inputs are not permitted"),
        ([1, 2], "arguments must be a JSON object"),
    ]:
        bad = scale.invoke(arguments)
        assert not bad.ok and fragment in bad.error and bad.content == f"Error: {bad.error}"
    with pytest.raises(ValueError, match="parameter 'x' needs a type annotation"):
        tool(lambda x: x)
    with pytest.raises(ValueError, match="family must be one of"):
        tool(family="web")(calculator.fn)


def test_outputs_text_json_or_a_failure():
    assert render_output("plain") == "plain" and render_output({"a": [1, 2]}) == '{"a": [1, 2]}'
    with pytest.raises(TypeError, match="neither text nor JSON"):
        render_output(b"bytes")
    with pytest.raises(TypeError, match="neither text nor JSON"):
        render_output(float("nan"))


def test_calculator_is_safe_and_fails_fast():
    assert calculator.invoke({"expression": "2 * (3 + 4) - 10 / 4"}).content == "11.5"
    assert calculator.invoke({"expression": "sqrt(16) + 2**10"}).content == "1028"
    start = time.perf_counter()
    for expression, fragment in [
        ("9**9**9", "NumberTooHigh"),
        ("__import__('os').system('echo hi')", "raised"),
        ("open('/etc/passwd')", "FunctionNotDefined"),
        ("1/0", "ZeroDivisionError"),
        ("factorial(100000)", "factorial takes an integer from 0 to 999"),
        ("'a' * 3", "not a number"),
    ]:
        result = calculator.invoke({"expression": expression})
        assert not result.ok and fragment in result.error, (expression, result.error)
    assert time.perf_counter() - start < 1.0


def test_search_ranks_with_bm25(tmp_path):
    index = SearchIndex(CORPUS)
    hits = index.search("capital of France", top_k=2)
    assert [h["title"] for h in hits] == ["Paris", "Berlin"] and hits[0]["score"] > hits[1]["score"] > 0
    assert index.search("zebra") == []
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(__import__("json").dumps(d) for d in CORPUS) + "\n")
    made = search_tool(corpus_path=str(corpus), top_k=1)
    assert made.family == "search" and made.invoke({"query": "Iceland volcanoes"}).content.startswith("[1] A document")
    assert made.invoke({"query": "zebra"}).content == "No results."
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl line 2: not JSON"):
        search_tool(corpus_path=str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="document 0 must be a string or an object"):
        SearchIndex([{"body": "no text key"}])


def test_registry_and_references(tmp_path):
    registry = ToolRegistry.from_specs([FIXTURES, "agent_system.tools.builtin:calculator"])
    assert registry.names == ["add", "fails", "hangs", "crashes", "hogs", "garbage", "prints", "calculator"]
    assert registry.families()["add"] == "calculate" and registry.get("fails").source.ref == FIXTURES
    assert [s["function"]["name"] for s in registry.schemas()][:2] == ["add", "fails"]
    with pytest.raises(ValueError, match="two tools named 'calculator'"):
        ToolRegistry.from_specs(["agent_system.tools.builtin:calculator"] * 2)
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        load_tools("agent_system.tools.builtin:nope")
    with pytest.raises(ValueError, match="expected 'package.module:attr'"):
        load_tools("agent_system.tools.builtin")
    with pytest.raises(TypeError, match="expected a Tool"):
        load_tools("agent_system.tools.builtin:MATH_NAMES")
    with pytest.raises(ValueError, match="kwargs given but it names a Tool"):
        load_tools(ToolSpec(ref="agent_system.tools.builtin:calculator", kwargs={"x": 1}))
    made = load_tools(ToolSpec(ref="agent_system.tools.builtin:search_tool", kwargs={"documents": CORPUS}))
    assert made[0].name == "search" and made[0].source.kwargs == {"documents": CORPUS}


def _no_children() -> set[int]:
    """PIDs of this process's live children."""
    path = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def test_process_sandbox_survives_raise_hang_crash_memory_and_garbage():
    registry = ToolRegistry.from_specs([FIXTURES])
    before = _no_children()
    with make_tool_runner(registry, sandbox="process", num_workers=2, timeout_s=1.0, memory_mb=256) as runner:
        calls = [
            {"name": "add", "parameters": {"a": 2, "b": 3}},
            {"name": "fails", "parameters": {"reason": "tool bug"}},
            {"name": "hangs", "parameters": {"seconds": 30}},
            {"name": "crashes", "parameters": {"code": 3}},
            {"name": "hogs", "parameters": {"megabytes": 2048}},
            {"name": "garbage", "parameters": {}},
            {"name": "prints", "parameters": {"text": "hello"}},
            {"name": "add", "parameters": {"a": "x"}},
            {"name": "no_such_tool", "parameters": {}},
            {"name": "add", "parameters": {"a": 40, "b": 2}},
        ]
        start = time.perf_counter()
        results = runner.run(calls)
        elapsed = time.perf_counter() - start
        assert [r.name for r in results] == [c["name"] for c in calls]  # order kept
        assert [r.ok for r in results] == [True, False, False, False, False, False, True, False, False, True]
        assert results[0].content == "5" and results[9].content == "42"
        assert results[6].content == '{"printed": "hello", "n": 5}'  # the print did not corrupt the protocol
        reasons = [r.error for r in results]
        assert reasons[1] == "fails raised RuntimeError: tool bug"
        assert "timed out after 1s" in reasons[2] and results[2].seconds == 1.0
        assert "crashed its worker (exit code 3)" in reasons[3]
        assert "ran out of memory" in reasons[4] and "256.0 MiB" in reasons[4]
        assert "returned object, which is neither text nor JSON" in reasons[5]
        assert "argument 'a'" in reasons[7] and "unknown tool 'no_such_tool'" in reasons[8]
        assert elapsed < 10.0
        metrics = runner.metrics()
        assert metrics["tool/calls"] == 10 and metrics["tool/failures"] == 7
        assert metrics["tool/failure_rate"] == pytest.approx(0.7)
        assert metrics["tool/timeouts"] == 1 and metrics["tool/crashes"] == 1
        assert metrics["tool/calls_calculate"] == 3 and metrics["tool/calls_unknown"] == 1
        assert metrics["tool/seconds_per_call"] > 0
        again = runner.run([{"name": "add", "parameters": {"a": 1}}] * 3)  # replaced workers serve on
        assert [r.content for r in again] == ["2"] * 3
        assert len(runner.pool.workers) == 2 and all(w.proc.poll() is None for w in runner.pool.workers)
    assert _no_children() <= before  # no leaked worker processes


def test_in_process_runner_and_sandbox_refusals(tmp_path):
    registry = ToolRegistry.from_specs([FIXTURES])
    runner = make_tool_runner(registry, sandbox="none")
    results = runner.run([{"name": "add", "parameters": {"a": 1}}, {"name": "fails", "parameters": {"reason": "x"}}])
    assert [r.ok for r in results] == [True, False] and results[1].error == "fails raised RuntimeError: x"
    with pytest.raises(ValueError, match="tool 'inline' cannot run in the process sandbox"):

        @tool
        def inline() -> str:
            """Defined inside a test."""
            return ""

        ProcessToolRunner(ToolRegistry([inline]))
    with pytest.raises(ValueError, match="tool sandbox='docker'"):
        make_tool_runner(registry, sandbox="docker")
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('missing dependency')\n")
    with ProcessToolRunner(registry) as runner:
        runner.pool.argv[-2] = f'[{{"ref": "{broken}:x", "kwargs": {{}}}}]'
        with pytest.raises(ToolSandboxError, match="cannot build the tools: ImportError: missing dependency"):
            runner.start()


def test_mcp_client_against_a_local_stdio_server():
    from agent_system.tools.mcp_client import MCPToolset

    server = [str(HERE / "mcp_echo_server.py")]
    with MCPToolset(sys.executable, server, family={"add": "calculate"}, timeout_s=3.0) as toolset:
        assert toolset.tools.names == ["echo", "add", "boom", "slow"]
        add_schema = toolset.schemas()[1]["function"]
        assert add_schema["description"] == "Add two integers."
        assert add_schema["parameters"]["required"] == ["a", "b"]
        assert toolset.tools.families() == {"echo": "other", "add": "calculate", "boom": "other", "slow": "other"}
        runner = make_tool_runner(toolset.tools, sandbox="process")  # remote tools run from this process
        results = runner.run(
            [
                {"name": "echo", "parameters": {"text": "héllo"}},
                {"name": "add", "parameters": {"a": 2, "b": 40}},
                {"name": "boom", "parameters": {}},
                {"name": "add", "parameters": {"a": "x"}},
                {"name": "slow", "parameters": {"seconds": 10}},
            ]
        )
        assert [r.ok for r in results] == [True, True, False, False, False]
        assert results[0].content == "héllo" and results[1].content == "42"
        assert "Error executing tool boom" in results[2].error
        assert "validation error" in results[3].error
        assert "TimeoutError" in results[4].error or "no answer" in results[4].error
        assert toolset.call("echo", {"text": "still alive"}).content == "still alive"  # the timeout did not break it
        assert not toolset.call("missing", {}).ok
    assert not toolset.call("echo", {"text": "x"}).ok  # closed: a failed result, not a hang


def test_tools_run_through_the_multi_turn_loop(tokenizer):
    """Scripted policy turns call the calculator and search in the process sandbox; the observations the policy reads
    next are the tools' outputs, tokenised through the template's tool turn."""
    from agent_system.multi_turn_rollout.episode import ToolEpisode
    from agent_system.multi_turn_rollout.tool_loop import LoopConfig, ScriptedGenerator, run_tool_loop
    from verl.utils.reward_score.tool_formats import render_calls

    registry = ToolRegistry.from_specs(
        [
            "agent_system.tools.builtin:calculator",
            ToolSpec(ref="agent_system.tools.builtin:search_tool", kwargs={"documents": CORPUS, "top_k": 1}),
        ]
    )
    calc = render_calls([{"name": "calculator", "parameters": {"expression": "6 * 7"}}], "toolrl")
    both = render_calls(
        [{"name": "search", "parameters": {"query": "capital of Germany"}}, {"name": "calculator", "parameters": {}}],
        "toolrl",
    )
    with make_tool_runner(registry, sandbox="process", timeout_s=5.0) as runner:
        episodes = [ToolEpisode([{"role": "user", "content": q}], runner) for q in ("6*7?", "Berlin?")]
        scripts = [[calc, "<response> 42 </response>"], [both, "<response> Berlin </response>"]]
        outs = run_tool_loop(episodes, ScriptedGenerator(tokenizer, scripts), tokenizer, LoopConfig())
        metrics = runner.metrics()
    assert [o.stop_reason for o in outs] == ["answer", "answer"]
    assert [[c.result.content for c in o.calls] for o in outs] == [
        ["42"],
        ["[1] Berlin: Berlin is the capital of Germany.", "Error: calculator: argument 'expression': Field required"],
    ]
    assert (
        episodes[0].answer == "<response> 42 </response>" and episodes[0].tools[0]["function"]["name"] == "calculator"
    )
    text = tokenizer.decode(outs[1].response_ids)
    assert "<|im_start|>tool\n[1] Berlin: Berlin is the capital of Germany.<|im_end|>" in text
    assert metrics["tool/calls"] == 3 and metrics["tool/failures"] == 1
    assert metrics["tool/calls_search"] == 1 and metrics["tool/calls_calculate"] == 2


def test_a_tool_the_episode_does_not_offer_fails_without_running():
    registry = ToolRegistry(load_tools(f"{HERE / 'tool_fixtures.py'}:add"))
    registry.add(calculator)
    runner = make_tool_runner(registry, sandbox="none")
    results = runner.run(
        [{"name": "calculator", "parameters": {"expression": "1+1"}}, {"name": "add", "parameters": {"a": 2}}],
        offered=["add"],
    )
    assert [r.ok for r in results] == [False, True]
    assert "not offered here; offered: add" in results[0].content and results[1].content == "3"
    metrics = runner.metrics()
    assert metrics["tool/refused"] == 1 and metrics["tool/failures"] == 1 and metrics["tool/calls"] == 2
