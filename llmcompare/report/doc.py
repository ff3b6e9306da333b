"""Blocks rendered to both Markdown and HTML, for the report."""

from __future__ import annotations

import html
import math
import re

FOLD_ROWS = 25  # HTML: a table of more rows opens folded (<details>), its row count in the summary


def fmt(v, nd: int = 1) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


NUMERIC = re.compile(r"^[-+–]?[\d,.]*\d[\d,.]*%?( \[[-+\d,. ]+\])?( \(no interval\))?$|^–$")


def _td(c: str) -> str:
    """A cell: numbers right-aligned (the default), words left-aligned, long text given room."""
    cls = "" if NUMERIC.match(c) else " class='long'" if len(c) > 60 else " class='t'"
    return f"<td{cls}>{html.escape(c)}</td>"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def method_blocks(text: str) -> list[tuple]:
    """A method text as blocks: prose paragraphs, and each list of definitions ('  term   definition', deeper
    lines continuing it) as a two-column table."""
    blocks: list[tuple] = []
    for line in text.splitlines():
        if not line.strip():
            blocks.append(("gap",))
        elif m := re.match(r"^  (\S.*?) {2,}(\S.*)$", line) or re.match(r"^  (\S+) (\S.*)$", line):
            if not blocks or blocks[-1][0] != "defs":
                blocks.append(("defs", []))
            blocks[-1][1].append([m[1], m[2]])
        elif line.startswith("   ") and blocks and blocks[-1][0] == "defs":
            blocks[-1][1][-1][1] += " " + line.strip()
        elif blocks and blocks[-1][0] == "prose":
            blocks[-1][1].append(line.strip())
        else:
            blocks.append(("prose", [line.strip()]))
    out = []
    for b in blocks:
        if b[0] == "prose":
            out.append(("p", " ".join(b[1])))
        elif b[0] == "defs":
            out.append(("table", ["term", "definition"], [[t, " ".join(d.split())] for t, d in b[1]], "method"))
    return out


class Doc:
    """Blocks rendered to both Markdown and HTML."""

    def __init__(self):
        self.blocks: list[tuple] = []
        self.methods: dict[str, str] = {}  # title -> method text, stated once in the Method section

    def h(self, level: int, text: str):
        self.blocks.append(("h", level, text))

    def p(self, text: str):
        self.blocks.append(("p", text))

    def answer(self, sentences: list[str]):
        """The report's opening: sentences as a list (a box in HTML)."""
        self.blocks.append(("answer", sentences))

    def toc(self):
        """HTML: links to every level-2 section, wherever this stands."""
        self.blocks.append(("toc",))

    def table(self, head: list[str], rows: list[list], cls: str = ""):
        self.blocks.append(("table", head, [[fmt(c) if not isinstance(c, str) else c for c in r] for r in rows], cls))

    def img(self, name: str, alt: str):
        self.blocks.append(("img", name, alt))

    def method(self, title: str, text: str):
        """A method text for the Method section (method_section), once per title."""
        self.methods.setdefault(title, text)

    def method_section(self):
        if not self.methods:
            return
        self.h(2, "Method")
        for title, text in self.methods.items():
            self.h(3, title)
            self.blocks += method_blocks(text)

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "answer":
                out.append("\n".join(f"- {s}" for s in b[1]))
            elif b[0] == "table":
                out.append("| " + " | ".join(b[1]) + " |\n|" + "---|" * len(b[1]))
                out[-1] += "".join("\n| " + " | ".join(r) + " |" for r in b[2])
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1]})")
        return "\n\n".join(out) + "\n"

    def _html_table(self, b: tuple) -> str:
        e = html.escape
        head = "".join(f"<th>{e(c)}</th>" for c in b[1])
        rows = "".join("<tr>" + "".join(_td(c) for c in r) + "</tr>" for r in b[2])
        t = f"<div class='scroll'><table class='{b[3]}'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
        if len(b[2]) > FOLD_ROWS:
            return f"<details><summary>{len(b[2])} rows: {e(', '.join(b[1][:4]))}, ...</summary>{t}</details>"
        return t

    def _html_block(self, b: tuple) -> str:
        e = html.escape
        if b[0] == "h":
            anchor = f" id='{slug(b[2])}'" if b[1] == 2 else ""
            return f"<h{b[1]}{anchor}>{e(b[2])}</h{b[1]}>"
        if b[0] == "p":
            return f"<p>{e(b[1])}</p>"
        if b[0] == "answer":
            return "<div class='answer'><ul>" + "".join(f"<li>{e(s)}</li>" for s in b[1]) + "</ul></div>"
        if b[0] == "toc":
            links = [f"<a href='#{slug(x[2])}'>{e(x[2])}</a>" for x in self.blocks if x[0] == "h" and x[1] == 2]
            return "<nav>Sections: " + " · ".join(links) + "</nav>"
        if b[0] == "table":
            return self._html_table(b)
        if b[0] == "img":
            return f'<figure><img src="{e(b[1])}" alt="{e(b[2])}"><figcaption>{e(b[2])}</figcaption></figure>'
        return ""

    def html(self, title: str) -> str:
        e = html.escape
        body = "".join(self._html_block(b) for b in self.blocks)
        style = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em;line-height:1.4}"
                 "h2{border-bottom:1px solid #ddd;margin-top:1.6em}.scroll{overflow-x:auto}"
                 "table{border-collapse:collapse;font-size:12px;margin:1em 0}"
                 "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.t{text-align:left}"
                 "td.long{text-align:left;min-width:18em}table.method td,table.wide td{text-align:left;vertical-align:top}"
                 ".answer{background:#f4f7fb;border-left:4px solid #0072B2;padding:.4em 1em;font-size:15px}"
                 ".answer li{margin:.35em 0}nav{font-size:12px;margin:.8em 0;color:#555}"
                 "details summary{cursor:pointer;color:#0072B2;font-size:13px;margin:.6em 0}"
                 "img{max-width:100%}figure{margin:1em 0}figcaption{font-size:11px;color:#555}")
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title><style>{style}</style>"
                f"</head><body>{body}</body></html>\n")
