"""Command groups whose commands live outside ``shared/`` (the log bench in ``services/``, the Spark bench in
``pipelines/``): they register through an entry-point group in pyproject.toml and are loaded by name only
when listed or run, so ``shared/`` never imports ``services/`` or ``pipelines/``."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

import click


class PluginGroup(click.Group):
    """A click group that adds the commands of the entry-point group ``entry_point_group``."""

    def __init__(self, *args: object, entry_point_group: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.entry_point_group = entry_point_group

    def _entry_points(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=self.entry_point_group)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._entry_points()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            return cmd
        ep = self._entry_points().get(cmd_name)
        if ep is None:
            return None
        loaded = ep.load()
        if not isinstance(loaded, click.Command):
            raise click.ClickException(f"entry point {ep.value} ({self.entry_point_group}) is not a click command")
        return loaded
