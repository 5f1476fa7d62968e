"""The OpenAI request fields the inference server honours, checked before any generation.

Each endpoint's body is a pydantic model that forbids every other field, so a request for something the server does
not do (``best_of``, ``logit_bias``, ``tools``, ``echo``, ``stream_options`` ...) is a 400 naming the field instead of a
silent 200. What is accepted is honoured:

* ``max_tokens``: new tokens at most (default 16). ``/v1/completions`` takes 0 (each choice empty, finish reason
  ``"length"``, as the API defines it); ``/v1/chat/completions`` needs at least 1. A value beyond what the model's
  context leaves after the prompt is refused, naming both numbers.
* ``n`` (1 to :data:`MAX_N`), ``temperature`` (0 to 2; 0 is greedy), ``top_p`` (in (0, 1]: nucleus sampling, and the
  returned log-probs are of the distribution sampled from), ``seed``.
* ``stop``: a string or up to 4; a choice ends where one first appears, the text stops before it and the token ids
  at the token that completed it (finish reason ``"stop"``).
* ``logprobs``: the chosen tokens' log-probs are always returned; top alternatives are not, so completions accept
  ``logprobs`` null or 0 and chat ``logprobs`` true/false with ``top_logprobs`` null or 0.
* ``prompt``: one string or one list of token ids inside the vocabulary; ``messages``: ``role`` and string
  ``content`` each.
* ``stream``: server-sent events, a chunk per choice as the engine decodes (the HF engine; the vLLM engine answers
  in one response and refuses it).
* ``model``: the served model's name, its alias ``"policy"``, or absent.

Sources: the request fields are the OpenAI API's completions and chat completions references.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_N = 64  # choices per request
DEFAULT_MAX_TOKENS = 16
MODEL_ALIAS = "policy"  # the name OpenAIClient sends


class RequestError(ValueError):
    """A request the server refuses (HTTP ``status``, 400 unless said otherwise); the message names the field."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Optional[str] = None
    max_tokens: Optional[int] = None
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = None
    stream: bool = False

    @field_validator("stop")
    @classmethod
    def _stop(cls, value):
        stops = [value] if isinstance(value, str) else list(value or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("up to 4 non-empty strings")
        return stops


class CompletionRequest(_Request):
    """``POST /v1/completions``."""

    prompt: Union[str, List[int]]
    max_tokens: Optional[int] = Field(None, ge=0)
    logprobs: Optional[int] = Field(None, ge=0, le=0)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: Optional[str] = None


class ChatRequest(_Request):
    """``POST /v1/chat/completions``."""

    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=0)


def _field(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_request(body: Any, chat: bool) -> _Request:
    """The validated request of one endpoint.

    Raises:
        RequestError: the body is not a JSON object, or a field is unknown, missing or out of range (every problem
            named as ``field: what is wrong``).
    """
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    model = ChatRequest if chat else CompletionRequest
    try:
        return model.model_validate(body)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            name = _field(e["loc"])
            if e["type"] == "extra_forbidden":
                problems.append(f"{name}: not supported by this server")
            else:
                problems.append(f"{name}: {e['msg']}")
        raise RequestError("; ".join(problems)) from None


def check_model(request: _Request, served: str) -> None:
    """Raises RequestError (404): ``model`` names another model than the served one (or its alias)."""
    if request.model not in (None, served, MODEL_ALIAS):
        raise RequestError(f"model: {request.model!r} is not served here (this server serves {served!r})", 404)


def check_prompt_ids(prompt_ids: Sequence[int], vocab_size: int) -> None:
    """Raises RequestError: no tokens, or an id outside ``[0, vocab_size)`` (named with its position)."""
    if len(prompt_ids) == 0:
        raise RequestError("prompt: no tokens")
    for i, t in enumerate(prompt_ids):
        if not 0 <= int(t) < vocab_size:
            raise RequestError(f"prompt[{i}]: token id {t} is outside the vocabulary (0 to {vocab_size - 1})")


def new_token_budget(request: _Request, prompt_tokens: int, context_length: int) -> int:
    """``max_tokens`` (default :data:`DEFAULT_MAX_TOKENS`, cut to what the context leaves when not given).

    Raises:
        RequestError: a given ``max_tokens`` beyond ``context_length - prompt_tokens``, or a prompt that leaves no
            room for one new token.
    """
    room = int(context_length) - int(prompt_tokens)
    if room < 1:
        raise RequestError(f"prompt: {prompt_tokens} tokens leave no room in the model's context of {context_length}")
    if request.max_tokens is None:
        return min(DEFAULT_MAX_TOKENS, room)
    if request.max_tokens > room:
        raise RequestError(
            f"max_tokens: {request.max_tokens} is more than the model's context ({context_length}) leaves after the "
            f"prompt's {prompt_tokens} tokens ({room})"
        )
    return int(request.max_tokens)


def apply_stop(tokenizer, token_ids: List[int], logprobs: List[float], stops: List[str]) -> Optional[Dict[str, Any]]:
    """Where the first stop string appears in a choice's decoded text: ``{"token_ids", "logprobs", "text"}`` cut at the
    token that completes it (the text ends before the stop string), or None when none appears."""
    if not stops:
        return None
    for end in range(1, len(token_ids) + 1):
        text = tokenizer.decode(token_ids[:end], skip_special_tokens=True)
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            return {"token_ids": token_ids[:end], "logprobs": logprobs[:end], "text": text[: min(hits)]}
    return None
