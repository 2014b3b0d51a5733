"""Meetings' spans: rounds, each reply, each rolling summary."""

from __future__ import annotations

from typing import Any

from .drafts import Event, _Base
from .spans import AGENT, CHAIN, LLM


class _MeetingSpans(_Base):
    # meetings ---------------------------------------------------------------------

    def on_meeting_started(self, e: Event, p: Any) -> None:
        self.root(e, e.entity_id, "meeting", f"meeting {e.entity_id}", CHAIN,
                  **{"clawtower.meeting": e.entity_id,
                     "clawtower.meeting.participants": list(p.participants),
                     "clawtower.meeting.max_rounds": p.max_rounds,
                     "input.value": self.text(p.topic) if self.capture else None})

    def on_meeting_round_started(self, e: Event, p: Any) -> None:
        m = self.roots.get(e.entity_id)
        if m is not None:
            self.open(e, f"round:{e.entity_id}:{p.round}", f"round {p.round}", CHAIN, m,
                      **{"clawtower.meeting": e.entity_id, "clawtower.meeting.round": p.round,
                         "clawtower.meeting.summary_in_tokens": p.summary_in_tokens})

    def on_meeting_reply_recorded(self, e: Event, p: Any) -> None:
        r = self.spans.get(f"round:{e.entity_id}:{p.round}")
        if r is None:
            return
        start = max(r.start, e.ts - max(p.elapsed_s, 0.0))
        d = self.open(e, f"reply:{e.seq}", f"invoke_agent {p.agent}", AGENT, r, start=start,
                      **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": p.agent,
                         "gen_ai.request.model": p.model or None,
                         "gen_ai.usage.input_tokens": p.prompt_tokens,
                         "gen_ai.usage.output_tokens": p.completion_tokens,
                         "llm.token_count.prompt": p.prompt_tokens,
                         "llm.token_count.completion": p.completion_tokens,
                         "clawtower.meeting": e.entity_id, "clawtower.meeting.round": p.round,
                         "clawtower.meeting.stance": p.stance,
                         "clawtower.meeting.status": p.status})
        d.close(e)
        if p.status != "replied":
            d.error = p.status
            d.attrs["error.type"] = p.status
        if self.capture and p.raw:
            d.attrs["output.value"] = self.text(p.raw)

    def on_meeting_round_ended(self, e: Event, p: Any) -> None:
        r = self.spans.get(f"round:{e.entity_id}:{p.round}")
        if r is not None and r.end is None:
            r.close(e, **{"clawtower.meeting.consensus": p.consensus,
                          "clawtower.meeting.agree": p.agree,
                          "clawtower.meeting.disagree": p.disagree,
                          "clawtower.meeting.neutral": p.neutral})

    def on_meeting_summary_recorded(self, e: Event, p: Any) -> None:
        m = self.roots.get(e.entity_id)
        r = self.spans.get(f"round:{e.entity_id}:{p.round}")
        if m is None:
            return
        start = r.end if r is not None and r.end is not None else e.ts
        d = self.open(e, f"summary:{e.seq}", f"chat summary {p.round}", LLM, m, start=start,
                      **{"gen_ai.operation.name": "chat",
                         "gen_ai.usage.input_tokens": p.prompt_tokens,
                         "gen_ai.usage.output_tokens": p.completion_tokens,
                         "clawtower.meeting.round": p.round,
                         "clawtower.meeting.summary_tokens": p.tokens,
                         "clawtower.meeting.summary_truncated": p.truncated})
        d.close(e)
        if self.capture:
            d.attrs["output.value"] = self.text(p.text)

    def on_meeting_ended(self, e: Event, p: Any) -> None:
        d = self.roots.get(e.entity_id)
        if d is not None:
            d.attrs.update({"clawtower.meeting.result": p.result,
                            "clawtower.meeting.reason": p.reason,
                            "clawtower.meeting.rounds": p.rounds})
        self.end_root(e, e.entity_id, p.reason, failed=p.reason == "error",
                      message=p.detail)
