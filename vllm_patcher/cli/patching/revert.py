"""``revert``: every touched file back to the bytes pip installed (or a model's patches out)."""

from __future__ import annotations

import click

from ...catalogue.model import Catalogue
from ...errors import PatchFolderError, StrictRefusal
from ...install.target import Target
from ...patching import chosen
from ...patching import journal as journal_mod
from ...patching.journal import left_in_place
from ..app import Command, pass_app
from ..base import Application, waiting
from ..render import patching as render
from . import choice as choice_mod


@click.command(cls=Command)
@click.option(
    "--force", is_flag=True, help="Restore pristine even over edits made after apply (kept aside)."
)
@click.option(
    "--model",
    "model",
    metavar="DIR|REPO",
    help="Take out only the patches this target's family needs: every file back to pristine, "
    "then the other patches applied here applied again (two transactions, each all or none).",
)
@pass_app
def revert(app: Application, force: bool, model: str | None) -> None:
    """Restore every touched file to the bytes pip installed (with --model, keep the rest)."""
    from ...patching import txn  # status never loads the transaction (plan, diffs)

    opts = app.options
    target = opts.target()
    root = target.site_packages
    chosen.check_removable(root)  # refused before any file changes
    again: list[str] = []
    if model is not None:
        sel = choice_mod.select(opts, target, (), model)
        gone = set(sel.catalogue.selected)
        recorded = chosen.read(root)
        journal = journal_mod.load(root)
        # the recorded choice and every patch applied here (a capture is applied, not chosen)
        applied = journal.patches if journal is not None else []
        kept = list(dict.fromkeys([*(recorded.patches if recorded is not None else ()), *applied]))
        missing = [n for n in kept if n not in gone and n not in sel.catalogue.names]
        if missing:
            raise PatchFolderError(
                f"{', '.join(missing)} applied here, but not among the patches given; nothing "
                "was reverted; give its folder (--patches DIR) to keep it, or run "
                f"`{target.command('revert')}` to take every patch out"
            )
        again = [n for n in kept if n not in gone]
        if again:  # refused now, not once every file is back to pristine
            _check_again(target, sel.catalogue.unselected().select(again))
    result = txn.revert(target, force=force, on_wait=waiting(opts, "revert"))
    chosen.forget(root)  # every file is pristine: no choice stands
    shown = render.revert(result, target, left_in_place(root))
    if again:
        whole = sel.catalogue.unselected().select(again)
        txn.apply(target, whole, on_wait=waiting(opts, "apply"))
        chosen.write(root, chosen.Choice(tuple(again)))
        shown = render.reapplied(shown, again)
    app.show(shown)


def _check_again(target: Target, keep: Catalogue) -> None:
    """The patches ``revert --model`` keeps must apply again over pristine files on their own."""
    from ...patching import txn

    try:
        txn.check_applies_over_pristine(target, keep)
    except (PatchFolderError, StrictRefusal) as exc:
        raise PatchFolderError(
            f"the patches kept ({', '.join(sorted(keep.selected))}) do not apply again without the "
            f"model's: {exc.message.split('; ')[0]}; nothing was reverted; run "
            f"`{target.command('revert')}` to take every patch out"
        ) from None
