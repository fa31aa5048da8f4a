"""`wgc run PLAN --node-rank K --master-addr HEAD[:PORT] --headless`: one host of a multi-host plan.

The flags are vLLM's and SGLang's (torchrun's too): `--node-rank K` is the host's position in
`[[cluster.hosts]]` (or `--node NAME`), `--master-addr` the head's address (default: host 0's),
PORT the placement's `[transport] port` (default: the plan's), `--nnodes` optional and checked.
The host runs an agent and its workers, no HTTP and no coordinator (runtime/process/agent.py).
"""

from __future__ import annotations

from wgc.plan.model import Plan


def parse_master(text: str | None, plan: Plan) -> tuple[str, int]:
    """HOST[:PORT] (an IPv6 address in brackets); ValueError in one line naming the flag."""
    default_port = plan.transport.port if plan.transport is not None else 29500
    if text is None or not text.strip():
        return plan.hosts[0].address, default_port
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host:
        raise ValueError(f"--master-addr {text}: expected HOST[:PORT], such as 10.0.0.1:29500")
    if not port:
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--master-addr {text}: the port must be a number from 1 to 65535")
    return host, int(port)


def node_rank_of(plan: Plan, node_rank: int | None, node: str | None) -> int:
    """The node rank from --node-rank or --node NAME (ValueError naming the flag)."""
    names = [h.name for h in plan.hosts]
    if node is not None:
        if node not in names:
            raise ValueError(f"--node {node}: the plan's hosts are {', '.join(names)}")
        if node_rank is not None and names.index(node) != node_rank:
            raise ValueError(f"--node {node} is node rank {names.index(node)}, not --node-rank {node_rank}")
        return names.index(node)
    if node_rank is None:
        raise ValueError("--headless needs --node-rank K (or --node NAME): which host of the plan this is")
    return node_rank


async def run_node(plan_file: str, node_rank: int | None, node: str | None, nnodes: int | None,
                   master: str | None, fake: bool, join_timeout: float, allow_modules: tuple[str, ...] | None) -> int:
    """Join the head and serve this host's ranks until the head stops, goes silent, or a signal comes."""
    from wgc.plan.file import load_plan
    from wgc.runtime.process.agent import Agent, AgentOptions, check_node
    from wgc.runtime.process.modules import allowed_prefixes, check_components

    _, plan = load_plan(plan_file)
    k = node_rank_of(plan, node_rank, node)
    check_node(plan, k, nnodes)
    address, port = parse_master(master, plan)
    prefixes = allowed_prefixes(plan, allow_modules)
    if not fake:
        check_components(plan, prefixes)
    agent = Agent(plan, plan_file, AgentOptions(k, address, port, fake, prefixes, join_timeout))
    return await agent.run()


def run_headless(plan_file: str, fake: bool, headless: bool, node_rank: int | None, node_name: str | None,
                  nnodes: int | None, master: str | None, join_timeout: float, serving: bool,
                  allow_modules: tuple[str, ...]) -> None:
    """A host other than the head: its agent and workers until the head stops them (run_node.py)."""
    import asyncio
    import sys

    import click

    from wgc.cli.run_cmd import _module_prefixes, _until_signal
    from wgc.cli.sources import EXIT_USAGE
    from wgc.plan.file import PlanFileError
    from wgc.runtime.process.errors import StartError

    try:
        if not headless:
            raise ValueError("--node-rank, --node and --master-addr are for the other hosts: add --headless "
                             "(the head runs `wgc run PLAN --serve ...` with none of them)")
        if serving:
            raise ValueError("--headless runs no coordinator: --serve, --request and -o go to the head")
        prefixes = _module_prefixes(allow_modules)
        status = asyncio.run(_until_signal(run_node(plan_file, node_rank, node_name, nnodes, master, fake,
                                                    join_timeout, prefixes)))
    except ValueError as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(EXIT_USAGE)
    except PlanFileError as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(EXIT_USAGE if err.kind == "unreadable" else 1)
    except (StartError, OSError) as err:
        click.echo(f"wgc: {err}", err=True)
        sys.exit(1)
    sys.exit(status)

