"""Router inference with executed tools: each routed prompt plays one episode of the executing tool loop
(``docs/tools.md``), the route deciding which tools it may call.

A route offers the executable tools of its family (:func:`verl.router.families.offered_tools`: ANSWER none, SEARCH
the ``search``-family tools, CALCULATE the ``calculate``-family ones, ``other`` tools on ``router.other_as``'s
route); a call to a tool the route does not offer fails without running (an error observation, ``tool/refused``).
Under ``router.answer_forbids_tool_calls`` the ANSWER episodes cannot open a tool call at all, as in training.
The prompt is the route's rewritten prompt, tokenised as for a single generation; each round is one greedy
``generate_sequences`` call of the inference rollout.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from omegaconf import OmegaConf

from verl.router import RouterAction, parse_other_as

__all__ = ["build_multi_turn", "play_routed"]

SECTION = "actor_rollout_ref.rollout.multi_turn"


def build_multi_turn(
    config: Any, tokenizer, response_length: int, tools: Optional[Sequence[str]] = None, sandbox: Optional[str] = None
):
    """The executing loop of an inference run, or None (single generation).

    The checkpoint's ``actor_rollout_ref.rollout.multi_turn`` section (its defaults for a checkpoint from before the
    section) with ``tools`` / ``sandbox`` from the command line over it; the loop runs when the section ends up
    enabled or ``tools`` is given. Calls are parsed with the checkpoint's ``data.tool_format``; ``other``-family
    tools are offered on the route its ``router.other_as`` names.

    Args:
        response_length: the budget of an episode's response, policy and observation tokens together.

    Raises:
        ConfigError: as :class:`verl.trainer.ppo.multi_turn.MultiTurnRollout` (no tools, a tool that does not load,
            a bad sandbox).
    """
    from verl.trainer.config_utils import default_section
    from verl.trainer.ppo.multi_turn import MultiTurnRollout

    saved = OmegaConf.select(config, SECTION, default=None)
    section = default_section(SECTION)
    if saved is not None:
        section = OmegaConf.merge(section, saved)
    if tools:
        section.tools, section.enable = list(tools), True
    if sandbox is not None:
        section.sandbox = str(sandbox)
    if not section.enable:
        return None
    other_as = parse_other_as(OmegaConf.select(config, "router.other_as", default="search"))
    return MultiTurnRollout(
        section, tokenizer, str(config.data.tool_format), int(response_length), key=SECTION, other_as=other_as
    )


def play_routed(
    multi_turn,
    generate_sequences,
    tokens: dict[str, torch.Tensor],
    actions: torch.Tensor,
    messages: Sequence[Sequence[dict]],
    answer_forbids_tool_calls: bool,
) -> list[dict]:
    """Play the routed prompts; per prompt the fields its output row gains.

    Args:
        tokens: ``input_ids`` / ``attention_mask`` [B, P] of the rewritten prompts (left-padded).
        actions: [B] the routes.
        messages: the rewritten prompts (kept on the episodes).

    Returns:
        B dicts: ``response`` (the whole episode decoded, special tokens kept: turns and tool turns),
        ``answer`` (the last assistant turn's text), ``num_turns``, ``stop_reason``, ``offered_tools`` and
        ``tool_results`` (``name``, ``ok``, ``content``, ``seconds``, ``obs_tokens`` per executed call).
    """
    routes = [int(a) for a in actions.tolist()]
    offered = multi_turn.offered_for(routes)
    forbid = [answer_forbids_tool_calls and a == int(RouterAction.ANSWER) for a in routes]
    ids, mask = tokens["input_ids"], tokens["attention_mask"].bool()
    prompt_ids = [ids[i][mask[i]].tolist() for i in range(len(routes))]
    episodes = multi_turn.play(
        prompt_ids,
        generate_sequences,
        do_sample=False,
        validate=True,
        raw_prompts=[list(m) for m in messages],
        offered=offered,
        forbid_tool_calls=forbid,
    )
    decode = multi_turn.tokenizer.decode
    return [
        {
            "response": decode(e.response_ids, skip_special_tokens=False),
            "answer": e.texts[-1] if e.texts else "",
            "num_turns": e.turns,
            "stop_reason": e.stop_reason,
            "offered_tools": names,
            "tool_results": [
                {
                    "name": c.result.name,
                    "ok": c.result.ok,
                    "content": c.result.content,
                    "seconds": c.result.seconds,
                    "obs_tokens": c.obs_tokens,
                }
                for c in e.calls
            ],
        }
        for e, names in zip(episodes, offered)
    ]
