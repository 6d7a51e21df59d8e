#!/usr/bin/env python3
"""Expected outputs of the recall tasks (docs/tasks.md#recall-intensive-qa), produced by the reference's own code.

Runs HazyResearch/prefix-linear-attention's lm-eval fork, unchanged, on synthetic records written here:
  - lm-eval-harness/lm_eval/tasks/based_{fda,swde,squadv2,nq,triviaqa,drop}/task.py, imported as they are
    (doc_to_text, validation_docs, construct_requests, process_results, aggregation, doc_to_target);
  - lm_eval/api/task.py Task.truncate_context and Task.build_all_requests, and ConfigurableTask.fewshot_context,
    taken out with `ast` (their decorators dropped) and bound to a stand-in task class;
  - lm_eval/utils.py create_iterator (ast);
  - lm_eval/__main__.py cli_evaluate's choice of context_key / answer_key per task (the `if 'based_squad' in
    task_names ...` statement, ast), with args.context_key = "text" as the fork's launch scripts pass it;
  - lm_eval/api/instance.py as it is;
  - Hugging Face datasets' squad_v2 metric (metrics/squad_v2/{squad_v2.py,evaluate.py}, datasets 2.14.0), its
    _compute run as it is; the datasets framework around it is a stand-in that casts as the metric's features do
    (id -> str, no_answer_probability -> float32).
Stand-ins (what cannot be imported here): `datasets` (Dataset yields a fresh dict per row, as Hugging Face's does;
load_metric), `numpy` when it is not installed (mean), the evaluator's loop over new_doc_set (evaluator.py: the
instances of a doc_id sorted by idx, process_results, the task's aggregation per metric) and a tokenizer equal to
mnemo's `byte` tokenizer (ids 0..255 = bytes, BOS 256, EOS 257; batch_encode_plus puts BOS first when the
tokenizer has one, as Hugging Face's does with special tokens; decode drops the specials and replaces every byte of
an invalid UTF-8 sequence by U+FFFD, as mnemo's decode does).

Usage: recall_reference.py REFERENCE_CHECKOUT DATASETS_CHECKOUT OUT_DIR
  REFERENCE_CHECKOUT: a work tree of HazyResearch/prefix-linear-attention (holds lm-eval-harness/lm_eval)
  DATASETS_CHECKOUT:  a work tree of huggingface/datasets at tag 2.14.0 (holds metrics/squad_v2)
  OUT_DIR:            tests/data/harness/recall (writes inputs/<file>.jsonl and expected.json)
Nothing of either repository is copied into OUT_DIR: only the synthetic records and the outputs.
"""
import ast
import contextlib
import copy
import hashlib
import importlib.util
import io
import json
import logging
import math
import os
import random
import struct
import sys
import types

# ---------------------------------------------------------------- the synthetic records

WORDS = ("the of and to in is was for on with as by at from that this which were are be has have it an or "
         "device pump valve model review submission predicate substantially equivalent indication clinical "
         "testing safety performance material biocompatibility sterilization software labeling manufacturer "
         "café résumé naïve Zürich São über — “quoted” 東京 ½ µ").split()


def filler(seed, nbytes):
    rnd = random.Random(seed)
    out, size = [], 0
    while size < nbytes:
        sentence = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(6, 14)))
        sentence = sentence[0].upper() + sentence[1:] + "."
        out.append(sentence)
        size += len(sentence.encode("utf-8")) + 1
    return " ".join(out)


MARK = "Summary of information above..."


def fda_records():
    f = filler
    r = [
        dict(key="device name", value="Acme Infusion Pump", text="510(k) summary. " + f(1, 300) +
             " Device name: Acme Infusion Pump. " + f(2, 200) + "\nDevice name:"),
        dict(key="applicant", value="Foo Medical Corp.", text=f(3, 250) + " Applicant: Foo Medical Corp. " +
             f(4, 100) + " applicant:APPLICANT:Applicant:"),
        dict(key="classification", value="K(2).v*+? [class II]", text="\n\n" + f(5, 200) +
             " Classification: K(2).v*+? [class II] is listed." + "\n.\n.."),
        dict(key="product code", value="5", text=f(6, 200) + " Product code: 5."),
        dict(key="x", value="something long", text=f(7, 200) + " x: something long."),
        dict(key="predicate", value="", text=f(8, 150) + " Predicate: none."),
        dict(key="état", value="Prêt à l'emploi", text=f(9, 200) + " ÉTAT: Prêt à l'emploi. " + f(10, 80)),
        dict(key="indications", value="treatment of chronic pain", text=f(11, 2600) +
             " Indications: Treatment of chronic pain in adults. " + f(12, 700)),
        dict(key="sterilization method", value="gamma irradiation at 25 kGy", text=f(13, 2300) + " 東京 " +
             f(14, 300)),
        dict(key="510(k) number", value="K123456", text=f(15, 900) + " 510(K) NUMBER: k123456 " + f(16, 1500) +
             " 510(k) number:"),
    ]
    for i, x in enumerate(r):
        x["doc_id"] = i
        x["file_name"] = "K%06d.txt" % (1000 + i)
    return r


def swde_records():
    f = filler
    r = [
        dict(key="director", value="John Smith", text=f(21, 300) + " Director John Smith. " + f(22, 100) +
             " " + MARK + " director: John Smith"),
        dict(key="title", value="The Big Night", text=f(23, 200) + " The Big Night (1996). " + f(24, 80) +
             " Title:TITLE:\n " + MARK + " title:"),
        dict(key="budget", value="$12.5 (est.)", text="\n " + f(25, 200) + " Budget $12.5 (est.) only.\n \n.. " +
             MARK + " budget: $12.5 (est.)"),
        dict(key="rating", value="7", text=f(26, 200) + " rated 7 " + MARK + " rating: 7"),
        dict(key="genre", value="crime drama", text=f(27, 2700) + " Genre: Crime Drama. " + f(28, 400) + " " +
             MARK + " genre:"),
        dict(key="tuition", value="$41,000 per year", text=f(29, 2400) + " " + MARK + " tuition:"),
        dict(key="phone", value="555-0100", text=f(30, 300) + " call us " + MARK + " phone: 555-0100"),
        dict(key="a", value="bb", text=f(31, 100) + " " + MARK + " a: bb"),
    ]
    for i, x in enumerate(r):
        x["doc_id"] = i
    return r


def squad_records():
    f = filler
    rows = [
        ("What is the capital of France?", "Paris", f(41, 300) + " The capital of France is Paris. " + f(42, 80),
         "The capital of France is"),
        ("Who wrote it?", "the Brothers Grimm", f(43, 250) + " It was collected by the Brothers Grimm.",
         "It was written by"),
        ("What is unknown?", "", f(44, 200), "The unknown thing is"),
        ("How many?", "3", f(45, 200) + " There were 3 of them.", "The number of them was"),
        ("Which language?", "C++ (lang.)", f(46, 200) + " Written in C++ (lang.) mostly.", "  It is written in  "),
        ("When was it built?", "in 1889", f(47, 2600) + " It was built in 1889 by Eiffel. " + f(48, 500),
         "It was built"),
        ("Where is it?", "nowhere to be found", f(49, 2200), "It is located"),
        ("What is the capital of France?", "Lyon", f(50, 150) + " Lyon is large.", "The capital of France is"),
    ]
    r = []
    for i, (q, v, para, completion) in enumerate(rows):
        r.append(dict(doc_id=i, title="T%d" % i, context=para + " Question: " + q, question=q, value=v,
                      text=para + " " + completion, new_id=i))
    r[7]["new_id"] = 0  # the first record's id: without cutting, the squad_v2 metric keeps one score per id
    return r


def qa_records(kind):
    f = filler
    if kind == "triviaqa":
        rows = [
            ("[DOC] [TLE] Eiffel Tower [PAR] " + f(61, 300) + " The tower is 330 metres tall. [PAR] How tall is it?",
             "How tall is it?", ["330 metres", "330 m"], 5),
            (f(62, 250) + " Mount Everest is the highest. which is the highest mountain? Which is the highest "
             "mountain?", "Which is the highest mountain?", ["Mount Everest", "Everest"], 5),
            (f(63, 2700) + " The answer is Zeus (god). " + f(64, 300), "Who is the king of the gods?",
             ["Zeus (god)", "Zeus"], 9),
            (f(65, 200) + " It is 7.", "  What number?  ", ["", "seven"], 9),
            ("[PA[PAR]R] " + f(66, 150) + " Paris.", "Capital?", ["Paris"], 11),
            (f(67, 200) + ".. ..", "Anything?", ["a.b*c"], 12),
        ]
        return [dict(context=c, question=q, answers=a, doc_id=d, orig_question="Q: " + q.strip() + ":")
                for c, q, a, d in rows]
    if kind == "nq":
        rows = [
            (f(71, 300) + " The river is the Nile. where is the longest river", "where is the longest river",
             ["the Nile", "Nile"], 3, [], 10),
            (f(72, 250) + " Answer: Tokyo. Where Is The Capital Of Japan", "where is the capital of japan",
             ["Tokyo"], 40, [], 11),
            (f(73, 200) + " who won? who won?", "who won?", ["Brazil"], 0, [], 12),
            (f(74, 200) + " It is 7.", "how many", ["7", "seven"], 9, [], 13),
            (f(75, 250) + " The alternate name is Big Apple.", "what is the nickname", ["New York City"], 2000,
             ["Gotham", "big apple"], 14),
            (f(76, 2600) + " " + f(77, 300), "what is missing", ["not in the text"], 700, [], 15),
            (f(78, 200), "what is missing here", ["absent answer"], 5, [], 16),
            (f(79, 2500) + " The score was 3-1 (a.e.t.). " + f(80, 400), "what was the score",
             ["3-1 (a.e.t.)", "three to one"], 12, [], 17),
        ]
        return [dict(id=i, context=c, question=q, answers=a, tok_pos=t, alt_answers=alt,
                     orig_question=q + "?:") for c, q, a, t, alt, i in rows]
    rows = [  # drop
        (f(81, 300) + " The Bears scored 12 points. how many points did the bears score",
         "How many points did the Bears score", ["12", "twelve"]),
        (f(82, 2700) + " The second quarter ended 3 to 0. " + f(83, 300), "what was the score", ["3"]),
        (f(84, 200) + " Smith kicked the longest field goal....", "Who kicked the longest field goal?",
         ["Smith", "John Smith"]),
        (f(85, 200) + " It lasted 1.5 hours (approx.).", "how long?", ["1.5 hours (approx.)"]),
    ]
    return [dict(context=c, question=q, answers=a, orig_question=q + "::") for c, q, a in rows]


def records(kind):
    return {"fda": fda_records, "swde": swde_records, "squad": squad_records}.get(kind, lambda: qa_records(kind))()


# (mnemo task, reference task, record kind, module folder, class, data file)
TASKS = [
    ("fda", "based_fda", "fda", "based_fda", "FDA", "fda"),
    ("swde", "based_swde", "swde", "based_swde", "SWDE", "swde"),
    ("squad_completion", "based_squad", "squad", "based_squadv2", "BasedSQUADCompletion", "squad_completion"),
    ("nq", "based_nq_2048", "nq", "based_nq", "BasedNQ2048", "nq"),
    ("triviaqa", "based_triviaqa", "triviaqa", "based_triviaqa", "BasedTriviaQA", "triviaqa"),
    ("drop", "based_drop", "drop", "based_drop", "BasedDrop", "drop"),
    ("fda_twice", "based_fda_twice", "fda", "based_fda", "FDATwice", "fda"),
    ("swde_twice", "based_swde_twice", "swde", "based_swde", "SWDETwice", "swde"),
    ("squad_completion_twice", "based_squad_twice", "squad", "based_squadv2", "BasedSQUADCompletionTwice",
     "squad_completion"),
    ("nq_twice", "based_nq_2048_twice", "nq", "based_nq", "BasedNQTwice2048", "nq"),
    ("triviaqa_twice", "based_triviaqa_twice", "triviaqa", "based_triviaqa", "BasedTriviaQATwice", "triviaqa"),
    ("drop_twice", "based_drop_twice", "drop", "based_drop", "BasedDropTwice", "drop"),
]

# (name, cutting_context, context_length, answer_length, tokenizer has BOS)
SETTINGS = [
    ("uncut", False, 2048, 48, True),
    ("cut_2048_48", True, 2048, 48, True),
    ("cut_64_16", True, 64, 16, True),
    ("cut_64_16_plain", True, 64, 16, False),
]


def fake_response(doc_index, labels):
    """The model's answers for one document: (generation, loglikelihood of " unanswerable")."""
    gold = labels[0] if labels else ""
    gens = [gold, "The " + gold.upper() + ".", "not it", "", "maybe " + gold + " and some more words here"]
    lls = [-0.7, -3.5, 0.0, -12.0, -0.05]
    return gens[doc_index % 5], lls[doc_index % 5]

# ---------------------------------------------------------------- the reference, loaded


class ByteTokenizer:
    """mnemo's `byte` tokenizer (tasks/tokenizer.cpp) with Hugging Face's call signatures."""

    def __init__(self, bos):
        self.bos = bos

    def batch_encode_plus(self, texts, return_tensors=None, padding=False, truncation=None, **kw):
        return {"input_ids": [([256] if self.bos else []) + list(t.encode("utf-8")) for t in texts]}

    def decode(self, ids, skip_special_tokens=False):
        data = bytes(int(i) for i in ids if 0 <= int(i) < 256)
        out, i = [], 0
        while i < len(data):
            n = utf8_len(data, i)
            if n == 0:
                out.append("\ufffd")
                i += 1
            else:
                out.append(data[i:i + n].decode("utf-8"))
                i += n
        return "".join(out)


def utf8_len(s, i):
    c = s[i]
    if c < 0x80:
        return 1
    lo, hi = 0x80, 0xBF
    if 0xC2 <= c <= 0xDF:
        n = 2
    elif 0xE0 <= c <= 0xEF:
        n = 3
        lo = 0xA0 if c == 0xE0 else lo
        hi = 0x9F if c == 0xED else hi
    elif 0xF0 <= c <= 0xF4:
        n = 4
        lo = 0x90 if c == 0xF0 else lo
        hi = 0x8F if c == 0xF4 else hi
    else:
        return 0
    if i + n > len(s) or not (lo <= s[i + 1] <= hi):
        return 0
    if any(not (0x80 <= s[i + k] <= 0xBF) for k in range(2, n)):
        return 0
    return n


class Dataset:
    """datasets.Dataset as the tasks use it: iteration and indexing give a fresh dict per row."""

    def __init__(self, rows):
        self.rows = [dict(r) for r in rows]

    @classmethod
    def from_list(cls, rows):
        return cls(rows)

    def __iter__(self):
        return (copy.deepcopy(r) for r in self.rows)

    def __getitem__(self, i):
        return copy.deepcopy(self.rows[i])

    def __len__(self):
        return len(self.rows)


def function_defs(path, wanted):
    """{name: ast.FunctionDef} for `wanted` = [(class name or None, function name)], decorators dropped."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (node.name, item.name) in wanted:
                    item.decorator_list = []
                    out[(node.name, item.name)] = item
        elif isinstance(node, ast.FunctionDef) and (None, node.name) in wanted:
            node.decorator_list = []
            out[(None, node.name)] = node
    missing = set(wanted) - set(out)
    if missing:
        raise SystemExit("not found in %s: %s" % (path, sorted(missing)))
    return out


def compile_functions(defs, namespace, path):
    module = ast.Module(body=list(defs), type_ignores=[])
    exec(compile(ast.fix_missing_locations(module), path, "exec"), namespace)
    return namespace


def load_reference(ref_root, ds_root):
    lm = os.path.join(ref_root, "lm-eval-harness", "lm_eval")
    # numpy: the real one when installed, else a stand-in with the one function the tasks call.
    try:
        import numpy  # noqa: F401
    except ImportError:
        np_stub = types.ModuleType("numpy")
        np_stub.mean = lambda xs: sum(xs) / len(xs)
        sys.modules["numpy"] = np_stub

    # lm_eval.api.instance: as it is.
    for name in ("lm_eval", "lm_eval.api"):
        mod = types.ModuleType(name)
        mod.__path__ = []
        sys.modules[name] = mod
    spec = importlib.util.spec_from_file_location("lm_eval.api.instance", os.path.join(lm, "api", "instance.py"))
    instance = importlib.util.module_from_spec(spec)
    sys.modules["lm_eval.api.instance"] = instance
    spec.loader.exec_module(instance)

    utils_ns = compile_functions(function_defs(os.path.join(lm, "utils.py"), [(None, "create_iterator")]).values(),
                                 {"islice": __import__("itertools").islice}, "utils.py")
    task_py = os.path.join(lm, "api", "task.py")
    defs = function_defs(task_py, [("Task", "truncate_context"), ("Task", "build_all_requests"),
                                   ("ConfigurableTask", "fewshot_context")])
    ns = compile_functions(defs.values(), {"re": __import__("re"), "Instance": instance.Instance,
                                           "utils": types.SimpleNamespace(**utils_ns),
                                           "eval_logger": logging.getLogger("lm-eval")}, task_py)

    class ConfigurableTask:  # stand-in base: the fork's methods above, a config, no dataset download
        @property
        def config(self):
            return self._config

    ConfigurableTask.truncate_context = ns["truncate_context"]
    ConfigurableTask.build_all_requests = ns["build_all_requests"]
    ConfigurableTask.fewshot_context = ns["fewshot_context"]
    task_mod = types.ModuleType("lm_eval.api.task")
    task_mod.ConfigurableTask = ConfigurableTask
    sys.modules["lm_eval.api.task"] = task_mod

    # datasets: Dataset and the squad_v2 metric.
    ds = types.ModuleType("datasets")
    ds.Dataset = Dataset

    class Metric:
        pass

    ds.Metric = Metric
    ds.MetricInfo = ds.Features = ds.Value = lambda *a, **k: None
    ds.features = types.SimpleNamespace(Sequence=lambda *a, **k: None)
    ds.utils = types.SimpleNamespace(file_utils=types.SimpleNamespace(
        add_start_docstrings=lambda *docs: (lambda cls: cls)))
    sys.modules["datasets"] = ds
    pkg = types.ModuleType("squad_v2_metric")
    pkg.__path__ = [os.path.join(ds_root, "metrics", "squad_v2")]
    sys.modules["squad_v2_metric"] = pkg
    spec = importlib.util.spec_from_file_location("squad_v2_metric.squad_v2",
                                                  os.path.join(ds_root, "metrics", "squad_v2", "squad_v2.py"))
    squad_v2 = importlib.util.module_from_spec(spec)
    sys.modules["squad_v2_metric.squad_v2"] = squad_v2
    spec.loader.exec_module(squad_v2)

    class LoadedMetric:  # datasets.Metric.compute: rows cast to the metric's features, then _compute
        def compute(self, predictions, references):
            f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
            preds = [{"id": str(p["id"]), "prediction_text": str(p["prediction_text"]),
                      "no_answer_probability": f32(p["no_answer_probability"])} for p in predictions]
            refs = [{"id": str(r["id"]), "answers": {"text": list(r["answers"]["text"]),
                                                     "answer_start": list(r["answers"]["answer_start"])}}
                    for r in references]
            return squad_v2.SquadV2._compute(None, predictions=preds, references=refs)

    def load_metric(name):
        assert name == "squad_v2", name
        return LoadedMetric()

    ds.load_metric = load_metric

    # __main__.py: the per-task context_key / answer_key statement.
    main_py = os.path.join(lm, "__main__.py")
    tree = ast.parse(open(main_py, encoding="utf-8").read(), main_py)
    cli = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "cli_evaluate")
    key_if = next(n for n in ast.walk(cli) if isinstance(n, ast.If) and "based_squad" in ast.unparse(n.test))
    key_code = compile(ast.fix_missing_locations(ast.Module(body=[key_if], type_ignores=[])), main_py, "exec")

    def keys_for(reference_name):
        args = types.SimpleNamespace(context_key="text", answer_key=["key", "value"])  # the launch scripts' values
        exec(key_code, {"args": args, "task_names": [reference_name]})
        return args.context_key, args.answer_key

    modules = {}

    def task_class(folder, cls):
        if folder not in modules:
            spec = importlib.util.spec_from_file_location("based_" + folder, os.path.join(lm, "tasks", folder, "task.py"))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            modules[folder] = mod
        return getattr(modules[folder], cls)

    return task_class, keys_for


class Config(types.SimpleNamespace):  # TaskConfig: attributes, and config["task"]
    def __getitem__(self, key):
        return getattr(self, key)


def make_task(cls, reference_name, rows):
    t = cls.__new__(cls)  # no __init__: it would download the dataset
    t._config = Config(task=reference_name, description="", num_fewshot=None, repeats=1, doc_to_choice=None,
                       metadata={"version": cls.VERSION})
    t.multiple_input = 0
    t.dataset = {"validation": Dataset(rows)}
    return t


LONG = 160  # characters: a longer string is stored as its SHA-256, length and ends (keeps the fixture small)


def pack(x):
    if isinstance(x, str) and len(x) > LONG:
        data = x.encode("utf-8")
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "head": x[:40], "tail": x[-40:]}
    if isinstance(x, (list, tuple)):
        return [pack(v) for v in x]
    if isinstance(x, dict):
        return {k: pack(v) for k, v in x.items()}
    return x


def jsonable(x):
    if isinstance(x, tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, list):
        return [jsonable(v) for v in x]
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    return x


def run_task(task_class, keys_for, entry, rows, setting):
    name, ref_name, kind, folder, cls_name, _ = entry
    _, cutting, context_length, answer_length, bos = setting
    cls = task_class(folder, cls_name)
    task = make_task(cls, ref_name, rows)
    context_key, answer_key = keys_for(ref_name)
    kept = {}  # original doc index -> key in new_doc_set
    original = cls.truncate_context

    def recording(self, doc, doc_id, **kw):
        inst, doc_set = original(self, doc, doc_id, **kw)
        if doc_set:
            kept[doc_id] = next(iter(doc_set))
        return inst, doc_set

    if cutting:
        task.truncate_context = types.MethodType(recording, task)
    with contextlib.redirect_stdout(io.StringIO()):  # build_all_requests prints its settings
        new_doc_set = task.build_all_requests(limit=None, rank=0, world_size=1, tokenizer=ByteTokenizer(bos),
                                              context_length=context_length, answer_length=answer_length,
                                              sequence_length=2048, context_key=context_key,
                                              cutting_context=cutting, answer_key=answer_key, skip_check_answer=False)
    if not cutting:
        kept = {i: i for i in new_doc_set}
    docs, vals = [], {}
    for i, row in enumerate(rows):
        if i not in kept:
            docs.append({"index": i, "skipped": True})
            continue
        key = kept[i]
        doc = new_doc_set[key]
        reqs = sorted([r for r in task._instances if r.doc_id == key], key=lambda r: r.idx)
        labels = doc["answers"] if "answers" in doc else [doc["value"]]
        gen, ll = fake_response(i, labels)
        results = []
        for r in reqs:
            results.append(gen if r.request_type == "generate_until" else (ll, False))
        metrics = task.process_results(doc, results)
        for m, v in metrics.items():
            vals.setdefault(m, []).append(v)
        delta = {k: v for k, v in doc.items() if k not in row or row[k] != v}
        docs.append({
            "index": i,
            "skipped": False,
            "requests": [{"type": r.request_type, "arguments": pack(jsonable(r.arguments))} for r in reqs],
            "doc_changed": pack(delta),
            "doc_removed": [k for k in row if k not in doc],
            "target": task.doc_to_target(doc),
            "generation": gen,
            "loglikelihood": ll,
            "contains": metrics["contains"],
            "squad_prediction": jsonable(metrics["exact"][0]) if "exact" in metrics else None,
        })
    aggregate = {m: float(task.aggregation()[m](v)) for m, v in vals.items()}
    return {"docs": docs, "aggregate": aggregate, "context_key": context_key, "answer_key": answer_key}


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    ref_root, ds_root, out_dir = sys.argv[1:]
    task_class, keys_for = load_reference(ref_root, ds_root)
    os.makedirs(os.path.join(out_dir, "inputs"), exist_ok=True)
    inputs = {}
    for entry in TASKS:
        kind, file = entry[2], entry[5]
        if file not in inputs:
            rows = records(kind)
            columns = []  # Hugging Face rows share their columns
            for r in rows:
                columns += [c for c in r if c not in columns]
            rows = [{c: r.get(c) for c in columns} for r in rows]
            inputs[file] = rows
            with open(os.path.join(out_dir, "inputs", file + ".jsonl"), "w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
    expected = {"settings": [dict(zip(("name", "cutting_context", "context_length", "answer_length", "bos"), s))
                             for s in SETTINGS],
                "tasks": {}}
    for entry in TASKS:
        name, file = entry[0], entry[5]
        per = {"reference": entry[1], "file": file, "settings": {}}
        for s in SETTINGS:
            per["settings"][s[0]] = run_task(task_class, keys_for, entry, inputs[file], s)
        expected["tasks"][name] = per
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=0, sort_keys=True)
        f.write("\n")
    n_docs = sum(len(v) for v in inputs.values())
    n_cases = sum(len(st["docs"]) for t in expected["tasks"].values() for st in t["settings"].values())
    print("%d records, %d (task, setting, document) cases -> %s" % (n_docs, n_cases, out_dir))


if __name__ == "__main__":
    main()
