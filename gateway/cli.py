"""``specgate`` command line: ``serve``, ``prepare``, ``train-drafter`` and ``config``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from service.settings import Settings
from training.cli import add_parser as add_train_drafter

MASK = "********"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help="YAML config file (also SPECGATE_CONFIG)")
    serve.add_argument("--host", help="bind address (also SPECGATE_HOST)")
    serve.add_argument("--port", type=int, help="port (also SPECGATE_PORT)")
    serve.add_argument("--model", help="model directory; default: embedded SmolLM2")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    prepare = sub.add_parser("prepare", help="prepare the embedded model and drafters, then exit")
    prepare.add_argument("--config", help="YAML config file (also SPECGATE_CONFIG)")
    add_train_drafter(sub)
    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="validate a config file and print the "
                                                "resolved settings (file + environment)")
    check.add_argument("config", help="YAML config file")
    config_sub.add_parser("markdown", help="print the settings reference "
                                           "(docs/configuration.md) from the settings models")
    return parser


def load_settings(args: argparse.Namespace) -> Settings:
    # Sub-commands carry flags of their own (train-drafter's); only settings go here.
    overrides: dict[str, Any] = {k: v for k, v in vars(args).items()
                                 if k in Settings.model_fields and v is not None}
    try:
        return Settings(**overrides)
    except ValidationError as e:
        lines = [f"  {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
        sys.exit("invalid configuration:\n" + "\n".join(lines))
    except FileNotFoundError as e:
        sys.exit(str(e))


def resolved_config_yaml(settings: Settings) -> str:
    """The settings as the gateway would run them: modes resolved, secrets masked."""
    import yaml

    data = settings.model_dump(mode="json")
    data["modes"] = {name: m.model_dump(mode="json", exclude_none=True)
                     for name, m in settings.resolved_modes().items()}
    data["dtype"] = settings.resolved_dtype()
    if settings.admin_key is not None:
        data["admin_key"] = MASK
    data["api_keys"] = [MASK for _ in settings.api_keys]
    return str(yaml.safe_dump(data, sort_keys=False))


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "config" and args.config_command == "markdown":
        from service.settings_doc import settings_markdown

        print(settings_markdown(), end="")
        return
    settings = load_settings(args)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "config":
        print(resolved_config_yaml(settings), end="")
        return
    if args.command == "train-drafter":
        from training.cli import run as train_drafter

        train_drafter(args, settings.cache_dir)
        return
    if args.command == "prepare":
        from engines.embedded import prepare_embedded

        prepared = prepare_embedded(settings.cache_dir)
        print(f"model ready: {prepared.target_dir}")
        return

    from gateway.app import create_app
    from gateway.shutdown import http_server

    app = create_app(settings)
    print(f"SpecGate serving '{app.state.runtime.model_name}' on "
          f"http://{settings.host}:{settings.port} (engines start in the background; "
          f"GET /ready turns 200 when all are up)", flush=True)
    http_server(app, settings).run()


if __name__ == "__main__":
    main()
