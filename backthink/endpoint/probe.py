"""Whether an endpoint really uses tools: one short request that must call a trivial tool.

Some servers take a request's `tools` and silently drop them (llama.cpp's
server without a tool-call chat format, for one): every round then offers
tools the model never sees, and the owner's MCP servers are never called.
`backthink check` sends one probe, a prompt that asks for a call of one
tool with no arguments, and tells the three answers apart: the call came,
the endpoint refused the tool definitions (rounds then go plain on their
own), or a reply that neither calls nor refuses: the endpoint ignores tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from backthink.errors import ToolsRefusedError
from backthink.ports import ModelClient
from backthink.records import ModelMessage

PROBE_TOOL = "report_ready"
PROBE_DEFINITION = {
    "type": "function",
    "function": {
        "name": PROBE_TOOL,
        "description": "Report that you are ready. Takes no arguments.",
        "parameters": {"type": "object", "properties": {}},
    },
}
PROBE_PROMPT = (
    f"This is a test of tool calling. Call the tool {PROBE_TOOL} now, with no arguments, "
    "and write nothing else."
)


class ToolSupport(Enum):
    """What an endpoint did with the probe's tool."""

    CALLS = "calls"
    REFUSES = "refuses"
    IGNORES = "ignores"


@dataclass(frozen=True)
class ToolsProbe:
    """The probe's finding and one line that says it."""

    support: ToolSupport
    detail: str


async def probe_tools(model: ModelClient) -> ToolsProbe:
    """Ask the endpoint to call the probe's tool and say what it did.

    Raises:
        ModelError: the endpoint failed otherwise (unreachable, an error status, no reply).
    """
    messages = [ModelMessage(role="user", text=PROBE_PROMPT)]
    try:
        reply = await model.complete(messages, tools=[PROBE_DEFINITION])
    except ToolsRefusedError as exc:
        return ToolsProbe(
            ToolSupport.REFUSES, f"the endpoint refuses tools ({exc}); rounds go without them"
        )
    # Any call shows the definitions reached the model, even one it misnamed.
    if reply.tool_calls:
        return ToolsProbe(ToolSupport.CALLS, "the endpoint calls tools")
    return ToolsProbe(
        ToolSupport.IGNORES,
        "the endpoint ignores tools: asked to call one, the model answered in plain text "
        "(a server without a tool-call chat format drops them; see docs/budget.md)",
    )
