"""A drafter plugin in one file: follow each token's latest successor."""

from lab.api import Draft, Drafter, Option
from lab.hookspecs import hookimpl


class BigramDrafter(Drafter):
    name = "bigram"
    description = "chains each token's most recent successor in the context"
    options = (Option("min_run", int, 1, "propose nothing shorter than this"),)

    def draft(self, context, k):
        successor = {a: b for a, b in zip(context, context[1:])}
        out, tok = [], context[-1]
        while len(out) < k and tok in successor:
            tok = successor[tok]
            out.append(tok)
        return Draft(tuple(out) if len(out) >= self.opts.get("min_run", 1) else ())


@hookimpl
def lab_register_drafters(register):
    register(BigramDrafter)
