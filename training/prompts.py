"""The built-in offline prompt set: what a Python install ships, no hub, no download.

Three kinds, like the traffic a gateway sees: ``code`` (write a function from its
documentation), ``copy`` (rework a given text or code, so the answer repeats much
of the prompt) and ``chat`` (free questions). Sources: ``pydoc_data.topics``,
standard-library docstrings and source, the docstrings and source of packages a
SpecGate install brings (``THIRD_PARTY_MODULES``: networkx, sympy, numpy, jinja2,
requests, rich and others that vLLM, torch and the gateway depend on), and templated
questions.

The held-out evaluation set (``data/heldout.jsonl``) is drawn from sources the
training set never uses: the modules, documentation topics and chat subjects
listed in ``RESERVED_*``. Training prompts skip them, so held-out acceptance is
measured on text the drafter has not seen.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import random
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

HELDOUT_PATH = Path(__file__).parent / "data" / "heldout.jsonl"
# The built-in training set as committed: generated once from the sources below
# (``write_training_set``), because what a stdlib module exposes varies a little
# with the Python build and with what else was imported.
TRAIN_PATH = Path(__file__).parent / "data" / "train.jsonl"
KINDS = ("code", "copy", "chat")
# Small, side-effect-free modules whose functions have useful docstrings.
MODULES = (
    "textwrap", "string", "shlex", "fnmatch", "glob", "posixpath", "json", "csv", "base64",
    "binascii", "bisect", "heapq", "statistics", "fractions", "decimal", "random", "calendar",
    "datetime", "difflib", "filecmp", "html", "urllib.parse", "ipaddress", "email.utils",
    "colorsys", "operator", "functools", "itertools", "collections", "copy", "pprint",
    "reprlib", "enum", "numbers", "math", "cmath", "zlib", "gzip", "hashlib", "hmac",
    "secrets", "uuid", "shutil", "tempfile", "pathlib", "zipfile", "tarfile", "configparser",
    "argparse", "getopt", "logging", "warnings", "contextlib", "abc", "dataclasses", "typing",
    "inspect", "dis", "tokenize", "keyword", "ast", "locale", "gettext", "unicodedata",
    "stringprep", "codecs", "struct", "array", "weakref", "types", "graphlib", "sched",
    "queue", "threading", "selectors", "socket", "http.cookies", "mimetypes", "quopri",
    "plistlib", "sqlite3", "traceback", "timeit", "platform", "sysconfig", "zipimport",
    # Added for the second training slice (rows 1537 on of data/train.jsonl).
    "re", "io", "os", "pickle", "pickletools", "copyreg", "shelve", "bz2", "lzma", "pydoc",
    "doctest", "site", "pkgutil", "fileinput", "linecache", "signal", "subprocess", "ssl",
    "ftplib", "imaplib", "smtplib", "getpass", "compileall", "runpy", "tracemalloc",
    "symtable", "py_compile", "ntpath", "genericpath", "bdb", "pstats", "cProfile", "zipapp",
    "asyncio.tasks", "urllib.request", "xml.etree.ElementTree", "xml.sax.saxutils",
    "xml.dom.minidom", "xmlrpc.client", "http.server", "email.header", "wsgiref.util",
    "importlib.util", "importlib.metadata", "unittest.case", "unittest.util",
    # Added for the third training slice (rows 4609 on), with classes' methods.
    "os.path", "stat", "errno", "time", "sys", "string.templatelib", "html.parser",
    "http.client", "http.cookiejar", "urllib.robotparser", "urllib.error", "email.message",
    "email.parser", "email.generator", "email.policy", "email.charset", "email.encoders",
    "email.iterators", "mailbox", "netrc", "nntplib", "poplib", "telnetlib", "socketserver",
    "asyncio.events", "asyncio.queues", "asyncio.locks", "asyncio.streams",
    "asyncio.base_events", "concurrent.futures", "multiprocessing.pool", "optparse",
    "cmd", "code", "codeop", "pdb", "trace", "modulefinder", "opcode", "token", "pyclbr",
    "tabnanny", "filecmp", "dbm", "wave", "chunk", "sndhdr", "imghdr", "mimetypes",
    "encodings.idna", "encodings.punycode", "json.decoder", "json.encoder", "csv",
    "collections.abc", "importlib.resources", "importlib.abc", "zoneinfo", "contextvars",
    "unittest.mock", "unittest.loader", "unittest.runner", "unittest.suite", "xml.dom.pulldom",
    "xml.etree.ElementPath", "xml.sax.handler", "xml.sax.xmlreader", "xml.parsers.expat",
    "logging.handlers", "logging.config", "curses.ascii", "turtle", "tkinter.font",
    "lib2to3.pytree", "venv", "ensurepip", "webbrowser", "uu", "sre_parse", "sre_compile",
    "ctypes.util", "distutils.util", "tomllib", "secrets", "numbers", "heapq",
)
# Modules whose classes' documented methods are prompts too (the third slice).
# The fourth training slice (rows 21,982 on): packages a SpecGate install brings (vLLM's,
# torch's and the gateway's dependencies), functions and classes' methods alike, so the
# code and copy prompts cover thousands of functions the standard library does not have.
# A module missing from some install is skipped; the committed file keeps what was used.
THIRD_PARTY_MODULES = (
    "networkx.algorithms.dag", "networkx.algorithms.coloring.greedy_coloring",
    "networkx.generators.classic", "networkx.generators.small",
    "networkx.generators.random_graphs", "networkx.classes.function",
    "networkx.utils.misc", "networkx.algorithms.shortest_paths.generic",
    "networkx.algorithms.shortest_paths.weighted",
    "networkx.algorithms.shortest_paths.unweighted",
    "networkx.algorithms.traversal.depth_first_search",
    "networkx.algorithms.traversal.breadth_first_search", "networkx.algorithms.cycles",
    "networkx.algorithms.cluster", "networkx.algorithms.clique",
    "networkx.algorithms.matching", "networkx.algorithms.tree.mst",
    "networkx.algorithms.euler", "networkx.algorithms.isolate",
    "networkx.algorithms.distance_measures", "networkx.algorithms.bipartite.basic",
    "networkx.convert", "sympy.ntheory.factor_", "sympy.ntheory.primetest",
    "sympy.ntheory.generate", "sympy.ntheory.modular",
    "sympy.combinatorics.permutations", "sympy.utilities.iterables",
    "sympy.utilities.misc", "sympy.core.numbers", "sympy.polys.polytools",
    "sympy.solvers.solvers", "sympy.simplify.simplify", "sympy.matrices.dense",
    "sympy.sets.sets", "sympy.logic.boolalg", "sympy.geometry.point",
    "sympy.discrete.convolutions", "sympy.crypto.crypto", "sympy.stats.rv",
    "numpy.ma.core", "numpy.ma.extras", "numpy.polynomial.polynomial",
    "numpy.polynomial.polyutils", "jinja2.filters", "jinja2.utils", "jinja2.tests",
    "click.termui", "click.formatting", "click.utils", "yaml", "dateutil.rrule",
    "dateutil.tz.tz", "packaging.tags", "packaging.specifiers", "packaging.utils",
    "packaging.markers", "requests.utils", "requests.models", "requests.sessions",
    "urllib3.util.retry", "starlette.routing", "rich.text", "rich.console",
    "rich.markup", "pygments.util", "pygments.lexer", "tqdm.std", "attr._make",
    "markdown_it.common.utils", "mpmath.functions.functions", "mpmath.ctx_base",
    "werkzeug.utils", "werkzeug.http", "werkzeug.security",
    "sortedcontainers.sortedlist", "sortedcontainers.sorteddict", "dill._dill",
    "cloudpickle.cloudpickle", "fsspec.utils", "fsspec.core", "matplotlib.colors",
    "matplotlib.cbook", "typing_extensions", "pyparsing.core", "pyparsing.helpers",
    "idna.core", "aiohttp.helpers", "psutil", "ruamel.yaml.main", "tiktoken.core",
    "lark.lark", "einops.einops",
)
METHOD_MODULES = frozenset(MODULES[MODULES.index("os.path"):]) | set(THIRD_PARTY_MODULES) | {
    "json", "csv", "configparser", "argparse", "logging", "pathlib", "zipfile", "tarfile",
    "email.utils", "http.cookies", "sched", "queue", "threading", "sqlite3", "pprint",
    "reprlib", "string", "shlex", "html", "decimal", "fractions", "datetime", "random"}
RESERVED_MODULES = ("textwrap", "statistics", "difflib", "ipaddress", "colorsys",
                    "graphlib", "fnmatch", "calendar")
# The chat subjects of the first three training slices, then those added for the fourth
# (rows 21,982-28,125): a fourth-slice chat prompt never reuses an older subject.
FIRST_CHAT_SUBJECTS = (
    "photosynthesis", "the water cycle", "black holes", "volcanoes", "the Roman Empire",
    "machine learning", "the internet", "electric cars", "healthy sleep", "climate change",
    "the human heart", "honey bees", "the moon landing", "recycling", "earthquakes",
    "the French Revolution", "vaccines", "solar panels", "the stock market", "coffee",
    "chess", "the piano", "rainbows", "tides", "the printing press", "democracy",
    "gravity", "DNA", "the Great Wall of China", "penguins", "time zones", "inflation",
    "meditation", "the Olympic Games", "bread baking", "jazz music", "glaciers",
    "the immune system", "bicycles", "compound interest", "the Pyramids", "antibiotics",
    "wind turbines", "octopuses", "the Renaissance", "public speaking", "gardening",
    "the speed of light", "migrating birds", "batteries", "cloud computing", "origami",
    "deserts", "coral reefs", "the alphabet", "maps", "friendship", "exercise", "rivers",
    "the metric system", "thunderstorms", "libraries", "robots", "tea", "trains",
    # Added for the second training slice.
    "volunteering", "the telephone", "spiders", "the Vikings", "earth's atmosphere", "snow",
    "wolves", "photography", "the Silk Road", "nuclear energy", "video games", "mushrooms",
    "the Amazon rainforest", "ancient Greece", "vitamins", "lighthouses", "the guitar",
    "hurricanes", "money", "butterflies", "the Industrial Revolution", "submarines",
    "cooking pasta", "the periodic table", "kangaroos", "teamwork", "the camera",
    "space stations", "bees and flowers", "the Nile", "magnets", "sharks", "castles",
    "the ballet", "weather forecasts", "email", "soap", "the compass", "horses",
    "rain forests", "the Eiffel Tower", "microscopes", "owls", "paper", "the calendar",
    "volunteer firefighters", "opera", "cheese", "the human skeleton", "sunflowers",
    "the Titanic", "insects", "museums", "bridges", "the violin", "yoga", "frogs",
    "the Arctic", "tornadoes", "clocks", "algebra", "fairy tales", "the Moon's phases",
    "salt", "cats", "dogs", "the Internet of Things", "wind", "camping", "pirates",
    "knights", "the zoo", "bamboo", "rice", "football", "tennis", "marathons", "caves",
    "sculpture", "comets", "fossils", "the post office", "newspapers", "languages",
    "writing letters", "smartphones", "board games", "lakes", "waterfalls", "islands",
    "farming", "apples", "the heartbeat of a city", "traffic lights", "umbrellas",
    "kites", "fireworks", "snails", "whales", "mathematics", "poetry", "science fiction",
    "cybersecurity", "databases", "open-source software", "electricity", "sound waves",
    # Added for the third training slice.
    "the Moon", "Mars", "Jupiter", "the Milky Way", "stars", "eclipses", "meteors",
    "the seasons", "fog", "clouds", "lightning", "earth's core", "plate tectonics",
    "sand dunes", "the Sahara", "rainwater harvesting", "forests", "wetlands", "soil",
    "composting", "beekeeping", "dairy farming", "wheat", "potatoes", "tomatoes",
    "spices", "olive oil", "sugar", "bread", "pizza", "sushi", "soup", "breakfast",
    "vegetarian diets", "water", "hydration", "the lungs", "the skin", "teeth", "the eyes",
    "hearing", "memory", "dreams", "emotions", "habits", "stress", "happiness", "laughter",
    "kindness", "honesty", "patience", "curiosity", "leadership", "negotiation",
    "job interviews", "resumes", "saving money", "budgeting", "taxes", "banks",
    "credit cards", "insurance", "startups", "marketing", "advertising", "supply chains",
    "shipping containers", "airports", "highways", "subways", "electric bikes", "ships",
    "sailing", "hot-air balloons", "rockets", "satellites", "GPS", "radio", "television",
    "the printing of books", "e-books", "social media", "search engines", "programming",
    "Python", "algorithms", "sorting", "encryption", "passwords", "computer viruses",
    "operating systems", "keyboards", "artificial intelligence", "virtual reality",
    "3D printing", "drones", "self-driving cars", "quantum computers", "semiconductors",
    "the transistor", "light bulbs", "refrigerators", "washing machines", "plumbing",
    "architecture", "skyscrapers", "houses", "furniture", "painting", "drawing",
    "the Mona Lisa", "comics", "animation", "movies", "theatre", "dance", "drums",
    "the orchestra", "singing", "hip hop", "rock music", "folk songs", "the Beatles",
    "Shakespeare", "novels", "mythology", "the Greek gods", "ancient Egypt", "the Maya",
    "the Aztecs", "the Incas", "the Middle Ages", "samurai", "the Cold War",
    "the United Nations", "elections", "laws", "courts", "human rights", "cities",
    "villages", "population growth", "immigration", "languages of the world", "grammar",
    "spelling", "handwriting", "reading", "homework", "teachers", "universities",
    "scholarships", "online learning", "chess openings", "puzzles", "crosswords",
    "sudoku", "card games", "basketball", "baseball", "swimming", "running", "cycling",
    "skiing", "surfing", "hiking", "fishing", "birdwatching",
    "pets", "goldfish", "parrots", "rabbits", "turtles", "lions", "tigers", "giraffes",
    "zebras", "pandas", "koalas", "dolphins", "jellyfish", "crabs", "ants", "worms",
    "bats", "eagles", "crows", "pigeons", "hummingbirds", "trees", "oak trees", "cacti",
    "roses", "tulips", "moss", "seeds", "pollination", "evolution", "cells", "bacteria",
    "viruses", "genetics", "proteins", "enzymes", "atoms", "molecules", "chemical reactions",
    "acids and bases", "energy", "heat", "friction", "simple machines", "levers", "pulleys",
    "wheels", "engines", "steam power", "hydropower", "geothermal energy", "oil",
    "natural gas", "plastic", "glass", "steel", "wood", "cotton", "wool", "silk",
)
FOURTH_SLICE_CHAT_SUBJECTS = (
    "the Northern Lights", "auroras", "monsoons", "droughts", "floods", "mangroves",
    "otters", "beavers", "raccoons", "foxes", "deer", "moose", "bears", "polar bears",
    "camels", "llamas", "alpacas", "goats", "sheep", "cows", "pigs", "chickens", "ducks",
    "swans", "flamingos", "peacocks", "ostriches", "woodpeckers", "bats and echolocation",
    "moles", "hedgehogs", "squirrels", "chipmunks", "gorillas", "chimpanzees", "orangutans",
    "lemurs", "sloths", "armadillos", "anteaters", "hippos", "rhinos", "cheetahs",
    "leopards", "hyenas", "crocodiles", "alligators", "snakes", "lizards", "chameleons",
    "geckos", "salamanders", "toads", "dragonflies", "ladybugs", "grasshoppers", "crickets",
    "fireflies", "moths", "beetles", "termites", "wasps", "mosquitoes", "ticks",
    "earthworms", "snowflakes", "hailstorms", "the night sky", "constellations",
    "Saturn's rings", "Venus", "Mercury", "Neptune", "Pluto", "asteroids", "the Big Bang",
    "telescopes", "astronauts", "the International Space Station", "space suits",
    "rovers on Mars", "gravity on the Moon", "time travel stories", "the wheel",
    "the plough", "windmills", "water mills", "aqueducts", "canals", "dams",
    "locks and keys", "bicycles in cities", "car engines", "electric trains", "trams",
    "buses", "taxis", "motorcycles", "scooters", "parachutes", "kayaks", "canoes", "rowing",
    "sailing boats", "ferries", "cargo ships", "ports", "lighthouse keepers",
    "maps and atlases", "compasses and navigation", "passports", "hotels", "restaurants",
    "bakeries", "markets", "supermarkets", "shopping malls", "online shopping",
    "delivery drivers", "recipes", "soup kitchens", "lemonade", "orange juice", "milk",
    "yogurt", "butter", "eggs", "honey", "jam", "noodles", "dumplings", "tacos", "curry",
    "salads", "sandwiches", "pancakes", "waffles", "ice cream", "cookies", "cakes",
    "popcorn", "nuts", "beans", "lentils", "corn", "carrots", "onions", "garlic", "peppers",
    "mangoes", "bananas", "grapes", "strawberries", "lemons", "coconuts", "pineapples",
    "watermelons", "peaches", "cherries", "herbs", "mint", "basil", "ginger", "cinnamon",
    "vanilla", "coffee shops", "tea ceremonies", "kitchens", "cooking with kids",
    "table manners", "birthdays", "weddings", "holidays", "festivals", "parades",
    "carnivals", "circuses", "magic tricks", "juggling", "puppets", "toys", "dolls",
    "building blocks", "jigsaw puzzles", "treehouses", "playgrounds", "summer camp",
    "school lunches", "recess", "field trips", "science fairs", "spelling bees",
    "debate clubs", "school uniforms", "exams", "studying tips", "note taking",
    "time management", "procrastination", "motivation", "goal setting", "journaling",
    "minimalism", "decluttering", "moving house", "roommates", "neighbors", "grandparents",
    "siblings", "twins", "babies", "toddlers", "teenagers", "retirement", "aging",
    "first jobs", "remote work", "commuting", "offices", "coworkers", "meetings",
    "presentations", "spreadsheets", "emails at work", "customer service",
    "small businesses", "freelancing", "entrepreneurs", "factories", "robots in factories",
    "warehouses", "fishing boats", "lumberjacks", "miners", "firefighters",
    "police officers", "nurses", "doctors", "dentists", "pharmacists", "veterinarians",
    "chefs", "farmers", "carpenters", "plumbers", "electricians", "architects", "engineers",
    "scientists", "librarians", "journalists", "photographers", "painters", "sculptors",
    "musicians", "actors", "writers", "poets", "translators", "lawyers", "judges", "mayors",
    "presidents", "kings and queens", "castles and moats", "knights and armor",
    "the pyramids of Giza", "Stonehenge", "the Colosseum", "Machu Picchu", "the Taj Mahal",
    "Petra", "Angkor Wat", "the Statue of Liberty", "Big Ben", "the Golden Gate Bridge",
    "the Grand Canyon", "Niagara Falls", "the Mississippi River", "the Danube",
    "the Amazon River", "Antarctica", "Greenland", "Iceland", "Japan", "Brazil", "Kenya",
    "Egypt", "India", "Canada", "Australia", "Mexico", "Norway", "Italy", "Spain", "China",
    "Peru", "Morocco", "New Zealand",
)
CHAT_SUBJECTS = FIRST_CHAT_SUBJECTS + FOURTH_SLICE_CHAT_SUBJECTS
RESERVED_SUBJECTS = ("dinosaurs", "the ocean", "the Sun", "chocolate", "airplanes",
                     "the brain", "mountains", "elephants")
CHAT_TEMPLATES = (
    "What is {s}?", "Explain {s} to a ten-year-old.", "Give me three facts about {s}.",
    "Write a short paragraph about {s}.", "Why is {s} important?",
    "Write a short poem about {s}.", "What are the pros and cons of {s}?",
    "How would you describe {s} in five sentences?", "Tell me a short story about {s}.",
    "List five questions a student might ask about {s}.",
    # Added for the third training slice.
    "Describe the history of {s} briefly.", "What should a beginner know about {s}?",
    "Write a haiku about {s}.", "Compare {s} with something familiar.",
    "What are common misconceptions about {s}?", "Summarize {s} in one sentence.",
    "Write a short dialogue between two friends about {s}.",
    "Give me a fun fact about {s} and explain why it is true.",
)
COPY_TEMPLATES = (
    "Add a docstring and type hints to this function. Return the whole function.\n\n"
    "```python\n{src}\n```",
    "Rewrite this function with clearer variable names. Keep the behaviour.\n\n"
    "```python\n{src}\n```",
    "Add a comment above each line of this code.\n\n```python\n{src}\n```",
    "Repeat this code exactly, then explain it in one sentence.\n\n```python\n{src}\n```",
)
DOC_TEMPLATES = (
    "Summarize this passage from the Python documentation:\n\n{text}",
    "Rewrite this text as a bulleted list:\n\n{text}",
    "Correct any typos in this text and return it:\n\n{text}",
    "Quote the first two sentences of this text, then explain them:\n\n{text}",
)
CODE_TEMPLATES = (
    "Write a Python function `{name}{sig}` that does this: {doc}",
    "Implement `{name}{sig}` in Python. Its documentation says: {doc}",
    "Show an example of using Python's `{qual}` and explain the output.",
)
MAX_SOURCE_CHARS = 1200
MAX_DOC_CHARS = 900


@dataclass(frozen=True)
class Prompt:
    id: str
    kind: str
    text: str


def training_prompts(limit: int | None = None, seed: int = 0) -> list[Prompt]:
    """The training set, balanced across kinds, in a seeded order that depends on
    each prompt alone (a hash of seed and id), so one prompt more or less in some
    Python install does not reorder all the others."""
    by_kind: dict[str, list[Prompt]] = {k: [] for k in KINDS}
    for p in _all_prompts(reserved=False):
        by_kind[p.kind].append(p)
    for group in by_kind.values():
        group.sort(key=lambda p: hashlib.sha1(f"{seed}:{p.id}".encode()).hexdigest())
    mixed = [p for trio in zip(*by_kind.values(), strict=False) for p in trio]
    longest = max(len(g) for g in by_kind.values())
    for group in by_kind.values():  # the longer kinds' tails, after the balanced part
        mixed += group[len(mixed) // len(KINDS):longest]
    return mixed[:limit] if limit else mixed


def builtin_training_prompts() -> list[Prompt]:
    return prompts_from_file(TRAIN_PATH)


def write_training_set(path: Path = TRAIN_PATH, limit: int = 1536, seed: int = 0) -> None:
    save_prompts(path, training_prompts(limit, seed))


def extend_training_set(path: Path = TRAIN_PATH, total: int = 4608, seed: int = 0) -> None:
    """Append prompts the file lacks (balanced across kinds) up to ``total`` rows, keeping
    every existing row in place so that a recipe's ``--limit N`` keeps its meaning."""
    rows = prompts_from_file(path)
    have = {p.id for p in rows}
    fresh = [p for p in training_prompts(seed=seed) if p.id not in have]
    save_prompts(path, rows + fresh[:max(0, total - len(rows))])


def heldout_prompts(path: Path = HELDOUT_PATH) -> list[Prompt]:
    return [Prompt(**json.loads(line)) for line in path.read_text().splitlines() if line]


def save_prompts(path: Path, prompts: list[Prompt]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(asdict(p)) + "\n" for p in prompts))


def prompts_from_file(path: Path) -> list[Prompt]:
    """A user's prompts: JSONL with ``text`` (and optional ``id``, ``kind``), or plain lines."""
    out: list[Prompt] = []
    for n, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            row = json.loads(line)
            out.append(Prompt(id=str(row.get("id", n)), kind=row.get("kind", "chat"),
                              text=row["text"]))
        else:
            out.append(Prompt(id=str(n), kind="chat", text=line))
    return out


def write_heldout(path: Path = HELDOUT_PATH, per_kind: int = 16, seed: int = 1) -> None:
    """Regenerate the committed held-out file from the reserved sources."""
    rng = random.Random(seed)
    rows: list[Prompt] = []
    for kind in KINDS:
        group = [p for p in _all_prompts(reserved=True) if p.kind == kind]
        rng.shuffle(group)
        rows += group[:per_kind]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(asdict(p)) + "\n" for p in rows))


def _all_prompts(*, reserved: bool) -> Iterator[Prompt]:
    modules = RESERVED_MODULES if reserved else tuple(
        m for m in dict.fromkeys(MODULES + THIRD_PARTY_MODULES) if m not in RESERVED_MODULES)
    subjects = RESERVED_SUBJECTS if reserved else CHAT_SUBJECTS
    for name in modules:
        for qual, fn in _documented_functions(name):
            doc = _first_paragraph(inspect.getdoc(fn) or "")
            sig = _signature(fn)
            short = qual.rsplit(".", 1)[-1]
            for i, tpl in enumerate(CODE_TEMPLATES):
                yield _prompt("code", tpl.format(name=short, sig=sig, doc=doc, qual=qual),
                              qual, i)
            src = _source(fn)
            if src:
                for i, tpl in enumerate(COPY_TEMPLATES):
                    yield _prompt("copy", tpl.format(src=src), qual, i)
    for n, text in enumerate(_doc_excerpts(reserved)):
        for i, tpl in enumerate(DOC_TEMPLATES):
            yield _prompt("copy", tpl.format(text=text), f"topic{n}", i)
    for s in subjects:
        for i, tpl in enumerate(CHAT_TEMPLATES):
            yield _prompt("chat", tpl.format(s=s), s, i)


def _prompt(kind: str, text: str, source: str, variant: int) -> Prompt:
    digest = hashlib.sha1(f"{kind}:{source}:{variant}:{text}".encode()).hexdigest()[:12]
    return Prompt(id=f"{kind}-{digest}", kind=kind, text=text)


def _documented_functions(module_name: str) -> Iterator[tuple[str, object]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return
    for attr in sorted(vars(module)):
        fn = getattr(module, attr)
        if attr.startswith("_") or getattr(fn, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(fn) and inspect.getdoc(fn):
            yield f"{module_name}.{attr}", fn
        elif inspect.isclass(fn) and module_name in METHOD_MODULES:
            for name, meth in sorted(vars(fn).items()):
                if not name.startswith("_") and inspect.isfunction(meth) and meth.__doc__:
                    yield f"{module_name}.{attr}.{name}", meth


def _signature(fn: object) -> str:
    try:
        return str(inspect.signature(fn))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"


def _source(fn: object) -> str | None:
    try:
        src = inspect.getsource(fn)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    return src if len(src) <= MAX_SOURCE_CHARS else None


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.split("\n\n")[0].split())[:400]


def _doc_excerpts(reserved: bool) -> Iterator[str]:
    """Paragraph runs of the stdlib's own documentation; every 8th topic is held out."""
    from pydoc_data.topics import topics

    for n, key in enumerate(sorted(topics)):
        if (n % 8 == 0) != reserved:
            continue
        chunk: list[str] = []
        for para in topics[key].split("\n\n"):
            para = para.strip()
            if not para:
                continue
            if chunk and sum(map(len, chunk)) + len(para) > MAX_DOC_CHARS:
                yield "\n\n".join(chunk)
                chunk = []
            if len(para) <= MAX_DOC_CHARS:
                chunk.append(para)
        if chunk:
            yield "\n\n".join(chunk)
