"""The prompt lengths the ML.ENERGY replay assumes (issue 33): the runs publish none, so each
task's mean input tokens is derived here from published statistics where there are any.

lm-arena-chat. The benchmark (ml-energy/benchmark @ c1d6557, mlenergy/benchmark/llm/workloads.py
LMArenaChat, datasets.py LMArenaHumanPreferenceDataset.sample) draws conversations of
lmarena-ai/arena-human-preference-100k and turns one of T turns into T requests: request k's
prompt is the k user messages and the k - 1 responses between them (conversation_a, the
Arena model's), sent as chat messages. That dataset publishes no length statistics. Its
predecessors from the same site do (Zheng et al., "LMSYS-Chat-1M", ICLR 2024,
arXiv:2309.11998, Table 1, Llama-2 tokenizer; the same figures are on the Hugging Face cards of
lmsys/chatbot_arena_conversations and lmsys/lmsys-chat-1m):

    Chatbot Arena Conversations (33K Arena battles, Apr-Jun 2023): 1.2 turns, 52.3 tokens per prompt, 189.5 per response
    LMSYS-Chat-1M (Arena and single-model chat, Apr-Aug 2023):     2.0 turns, 69.5,                   214.5

With T geometric of mean m (each turn followed by another with the same chance; the one
distribution a mean alone fixes), a request's mean prompt over the requests is

    E[sum_k (k p + (k-1) r)] / E[T] = (m^2 p + m (m-1) r) / m = m p + (m - 1) r

(E[T(T+1)/2] = m^2, E[T(T-1)/2] = m (m - 1) for a geometric T), plus the chat template's tokens.
The replay takes the Arena battles' figures (same kind of data as the 100k set): 1.2 x 52.3 +
0.2 x 189.5 + 30 = 131 tokens. LMSYS-Chat-1M's would give 384, the sensitivity table's range.
Caveats: counted with Llama-2's tokenizer (Llama-3's needs up to 15% fewer for the same text,
Meta's Llama 3 release notes); the 2024 battles of the 100k set may be longer (not published).

Prefix caching. vLLM V1 enables it by default (vllm-project/vllm tests/v1/engine/
test_engine_args.py, test_prefix_caching_from_cli: "V1 turns on prefix caching by default")
and the benchmark's configs do not turn it off. Request k's prompt starts with request
k - 1's, sent just before it, so its cached blocks can be reused: at best a request computes
its new user message and the previous response only, p + r (m - 1) / m tokens on average
(prefix_cached_share). The replay does not model that reuse: it draws independent prompts.

gpqa and sourcegraph-fim: estimates with no published statistic behind them (GPQA-diamond
questions and their chat template; long FIM code context). The replayed table has no gpqa runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatStats:
    """A chat dataset's published mean turns per conversation and tokens per user prompt and per response."""

    turns: float
    prompt_tokens: float
    response_tokens: float


CHATBOT_ARENA_33K = ChatStats(1.2, 52.3, 189.5)    # arXiv:2309.11998 Table 1, "Chatbot Arena"
LMSYS_CHAT_1M = ChatStats(2.0, 69.5, 214.5)        # arXiv:2309.11998 Table 1, "LMSYS-Chat-1M"
# ESTIMATE: Llama-3.1's chat template adds a default system block (~25 tokens: the knowledge-cutoff
# and date lines) and a 4-5 token role header per message; Qwen3's has no default system block.
TEMPLATE_TOKENS = 30.0


def request_prompt_tokens(s: ChatStats, template_tokens: float = TEMPLATE_TOKENS) -> float:
    """Mean prompt tokens per request when every turn of a conversation is a request carrying its history
    (module doc: m p + (m - 1) r, geometric turns), plus the template."""
    m = s.turns
    return m * s.prompt_tokens + (m - 1.0) * s.response_tokens + template_tokens


def prefix_cached_share(s: ChatStats) -> float:
    """The share of the history prompt tokens (template left out) a perfect prefix cache would not recompute:
    request k computes only its user message and the previous response (module doc)."""
    m = s.turns
    full = m * s.prompt_tokens + (m - 1.0) * s.response_tokens
    new = s.prompt_tokens + s.response_tokens * (m - 1.0) / m
    return 1.0 - new / full


INPUT_MEAN = {
    "lm-arena-chat": round(request_prompt_tokens(CHATBOT_ARENA_33K)),   # 131 (module doc)
    "gpqa": 300,              # ESTIMATE, no published statistic used
    "sourcegraph-fim": 3000,  # ESTIMATE, no published statistic used
}
