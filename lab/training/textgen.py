"""Seeded English sentences for the voice's training data, from word lists and a grammar of our
own (lab/training/words): statements, questions, exclamations, requests, lists, quoted speech,
compound sentences, and numbers in every written form the frontend expands.

The teacher reads whatever it is given, so what matters is variety: every English sound, in
many neighbours and at many places in a sentence, the intonation of questions, lists and
exclamations, and lengths from two words to about forty. The student reads the same frontend's
phonemes, so a number only has to be read sensibly, not in one particular way; units are
written as words because the frontend leaves "km" to espeak-ng, which spells it out.

The lab's sentence sets are evaluation text: `make_split` keeps them, and every generated
sentence equal to one of them once case and punctuation go, out of the training list.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from lab.frontend.corpus import list_sentence_sets, sentence_set
from lab.frontend.normalize import cardinal

WORDS_DIR = Path(__file__).resolve().parent / "words"
NOUN_LISTS = ("people", "things", "foods", "animals", "venues")
MAX_MISSES = 10_000  # repeats in a row before the grammar counts as worn out


@dataclass(frozen=True)
class Word:
    """A list entry: its forms (noun: singular, plural or "-" if uncountable; verb: base, third
    person, past, participle, -ing; template: itself) and its tags (a verb's object kinds, a
    venue's preposition, the nouns an adjective suits, a template's sentence kind)."""

    forms: tuple[str, ...]
    tags: tuple[str, ...]


def _plural(noun: str) -> str:
    if re.search(r"(s|x|z|ch|sh)$", noun):
        return noun + "es"
    if re.search(r"[^aeiou]y$", noun):
        return noun[:-1] + "ies"
    return noun + "s"


@functools.cache
def words(name: str) -> tuple[Word, ...]:
    """Entries of words/<name>.txt, one a line: "form/form/... : tag tag"."""
    entries = []
    for line in (WORDS_DIR / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        body, _, tags = line.partition(" : ")
        if not body.strip() or body.startswith("#"):
            continue
        forms = (body,) if name == "templates" else tuple(body.split("/"))
        if name in NOUN_LISTS and len(forms) == 1:
            forms += (_plural(forms[0]),)
        entries.append(Word(forms, tuple(tags.split())))
    return tuple(entries)


@functools.cache
def templates(kind: str, sub: str | None = None) -> tuple[str, ...]:
    tags = (kind, sub) if sub else (kind,)
    return tuple(w.forms[0] for w in words("templates") if w.tags == tags)


@functools.cache
def _adjectives(kind: str) -> tuple[str, ...]:
    """People and food take only adjectives tagged for them; other nouns the untagged ones."""
    plain = kind not in ("person", "food")
    return tuple(w.forms[0] for w in words("adjectives") if kind in w.tags or plain and not w.tags)


def _a(phrase: str) -> str:
    """"a" or "an" by sound: an umbrella, a unique one, an hour."""
    low = phrase.lower()
    vowel = low[0] in "aeiou" and not re.match(r"uni|use|usu|eu|one", low)
    return ("an " if vowel or re.match(r"hour|honest|heir", low) else "a ") + phrase


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


PRONOUNS = (("I", "1s"), ("you", "pl"), ("we", "pl"), ("they", "pl"), ("he", "3s"), ("she", "3s"))
OBJECT_PRONOUNS = ("me", "you", "him", "her", "us", "them")
KIN = ("my", "our", "your", "their", "her", "his")
SINGULAR_DETS = ("the",) * 6 + ("a",) * 4 + KIN + ("this", "that", "every", "another", "'s")
PLURAL_DETS = ("the",) * 4 + ("some", "these", "those", "my", "our", "several", "a few",
                              "many", "no", "'s", "#", "#")
MASS_DETS = ("the", "the", "some", "some", "a little", "more", "my", "a bowl of", "a jar of",
             "a plate of", "a cup of", "a bag of", "enough")
TENSES = ("past",) * 5 + ("present",) * 2 + ("future", "progressive", "perfect", "modal",
                                             "going", "was")
MODALS = ("can", "could", "should", "might", "must", "would")
NEGATIVE = {"did": "didn't", "do": "don't", "does": "doesn't", "will": "won't", "am": "am not",
            "is": "isn't", "are": "aren't", "was": "wasn't", "were": "weren't",
            "has": "hasn't", "have": "haven't", "can": "can't", "could": "couldn't",
            "should": "shouldn't", "might": "might not", "must": "mustn't", "would": "wouldn't"}
MONTHS = ("January February March April May June July August September October November "
          "December").split()
UNITS = {"distance": ("kilometers", "miles", "meters", "feet", "inches", "centimeters", "yards"),
         "weight": ("kilograms", "grams", "pounds", "ounces", "tons"),
         "volume": ("liters", "gallons", "cups", "teaspoons", "milliliters"),
         "duration": ("seconds", "minutes", "hours", "days", "weeks", "months", "years")}
JOINERS = (", and ", ", but ", " because ", " while ", ", so ", " although ", " until ",
           " after ", " before ", " when ", ", or ", ", yet ", " since ", " as soon as ")
# Slots that are one pick from a word list, and slots that are a noun phrase (list, plural, det).
PICKS = {"first": "first_names", "place": "places", "color": "colors", "adv": "adverbs",
         "noun": "things", "foodnoun": "foods", "animalnoun": "animals"}
PHRASES = {"thing": ("things", None, None), "things": ("things", True, None),
           "food": ("foods", None, None), "animal": ("animals", None, None),
           "people": ("people", True, None), "venue": ("venues", False, "the")}
VERB_FORMS = {"todo": 0, "did": 2, "doing": 4}  # slots for a verb in that form, with its object
KINDS = {"short": 8, "statement": 20, "yes_no": 8, "wh": 8, "exclaim": 5, "command": 7,
         "listing": 6, "quoted": 6, "numbers": 14, "compound": 10, "long": 7}


class _Writer:
    """Writes sentences from one seeded stream. Templates are filled by `format_map(self)`, so
    each {slot} is a fresh pick: a list entry, a noun phrase, an amount, or a method's result."""

    def __init__(self, r: random.Random) -> None:
        self.r = r

    def __getitem__(self, slot: str) -> str:
        if slot in PICKS:
            return self.pick(PICKS[slot])
        if slot in PHRASES:
            return self.np(*PHRASES[slot])
        if slot in VERB_FORMS:
            verb = self.verb()
            return f"{verb.forms[VERB_FORMS[slot]]} {self.obj(verb)}"
        if stock := templates(slot):
            return self.fill(self.r.choice(stock))
        if slot in UNITS:
            amount = self.small() if self.r.random() < 0.7 else self.decimal()
            return f"{amount} {self[slot + '_unit']}"
        if slot.endswith("_unit"):
            return self.r.choice(UNITS[slot.removesuffix("_unit")])
        return getattr(self, slot)()

    def fill(self, template: str) -> str:
        return template.format_map(self)

    def pick(self, name: str) -> str:
        return self.r.choice(words(name)).forms[0]

    def sentence(self) -> str:
        kind = self.r.choices(list(KINDS), weights=list(KINDS.values()))[0]
        if kind in ("short", "exclaim", "command", "numbers"):
            text = self.fill(self.r.choice(templates(kind)))
        else:
            text = getattr(self, kind)()
        return self.cap(text)

    # Sentence kinds that need more than a template.
    def statement(self) -> str:
        roll = self.r.random()
        text = self.clause()
        if roll < 0.2:
            text = f"{self['opener']} {text}"
        elif roll < 0.35:
            text = f"{self.time()}, {text}"
        return text + "."

    def yes_no(self) -> str:
        r, roll = self.r, self.r.random()
        if roll < 0.3:
            return self.fill(r.choice(templates("yes_no")))
        if roll < 0.45:
            subject = r.choice(("you", "we", "they"))
            verb = self.verb(transitive=True)
            aux, _, simple = self.parts("pl", verb, r.choice(("past", "present")))
            return f"{subject} {simple} {self.obj(verb)}, {NEGATIVE[aux]} {subject}?"
        return self.question(wh=False)

    def wh(self) -> str:
        if self.r.random() < 0.35:
            return self.fill(self.r.choice(templates("wh")))
        return self.question(wh=True)

    def listing(self) -> str:
        r = self.r
        kind = r.choice(("things", "things", "foods", "animals", "people", "places"))
        if kind == "places":
            items = [self["place"] for _ in range(r.randint(3, 5))]
        elif kind == "people":
            items = [self.person() for _ in range(r.randint(3, 5))]
        else:
            items = [self.np(kind, det=r.choice(("a", "#", "the", "some", None)))
                     for _ in range(r.randint(3, 6))]
        frame = r.choice(templates("listing", kind))
        last = " or " if frame.endswith("?") and kind != "people" else " and "
        joined = ", ".join(items[:-1]) + ("," if r.random() < 0.4 else "") + last + items[-1]
        return self.fill(frame.replace("{list}", joined))

    def quoted(self) -> str:
        r, roll = self.r, self.r.random()
        speaker = self.name() if r.random() < 0.7 else self.person()
        if roll < 0.35:
            inner = self.cap(self.clause())
            verb = self["said"]
            said = f"{speaker} {verb}" if r.random() < 0.6 else f"{verb} {speaker}"
            return f'"{inner}," {said}.'
        if roll < 0.65:
            return f'{speaker} {self["asked"]}, "{self.cap(self.question(r.random() < 0.5))}"'
        if roll < 0.85:
            return f'{speaker} {self["said"]}, "{self.cap(self.clause())}."'
        inner = self.cap(self.fill(r.choice(templates(r.choice(("exclaim", "command"))))))
        return f'{speaker} {r.choice(("shouted", "called out", "said"))}, "{inner}"'

    def compound(self) -> str:
        r, roll = self.r, self.r.random()
        if roll < 0.25:
            text = f"{self['fronted']} {self.clause()}, {self.clause()}"
        elif roll < 0.35:
            text = f"if {self.clause(tense='present')}, {self.clause(tense='future')}"
        elif roll < 0.45:
            text = f"{self['first']} had one rule: {self.clause()}"
        elif roll < 0.55:
            text = f"{self.clause()}; {self.clause()}"
        else:
            text = f"{self.clause()}{r.choice(JOINERS)}{self.clause()}"
        return text + (r.choice(".!?") if r.random() < 0.1 else ".")

    def long(self) -> str:
        """Clauses joined until about `target` words, perhaps with a remark, a list, an opener."""
        r = self.r
        target, text = r.randint(20, 40), self.clause()
        while len(text.split()) < target - 8:
            text += r.choice(JOINERS) + self.clause(negative=0.1)
            if r.random() < 0.2:
                text += f", {self['relative']}"
        if len(text.split()) < target - 4:
            kind = r.choice(("things", "foods", "animals"))
            items = [self.np(kind, det=r.choice(("a", "#", "some"))) for _ in range(3)]
            text += f", {r.choice(('with', 'along with', 'not to mention'))} {items[0]}, " \
                    f"{items[1]} and {items[2]}"
        if r.random() < 0.4:
            text = f"{self['opener']} {text}"
        return text + "."

    @staticmethod
    def cap(text: str) -> str:
        """Single spaces, none before punctuation, one final period after "a.m.", a capital."""
        text = re.sub(r"\s+([,.;?!])", r"\1", re.sub(r"\s+", " ", text)).strip()
        text = re.sub(r"\.\.$", ".", text)
        return text[0].upper() + text[1:]

    # People, things and places.
    def name(self) -> str:
        roll, surname = self.r.random(), self.pick("surnames")
        if roll < 0.55:
            return self["first"]
        return f"{self['first'] if roll < 0.8 else self['title']} {surname}"

    def person(self) -> str:
        roll = self.r.random()
        if roll < 0.6:
            return self.name()
        return self.np("people", plural=False, det=None if roll < 0.85 else self.r.choice(KIN))

    def modifiers(self, kind: str) -> str:
        """None, one or two adjectives that suit nouns of `kind`, the last perhaps a color."""
        r, roll = self.r, self.r.random()
        if roll < 0.55:
            return ""
        first, second = r.sample(_adjectives({"people": "person"}.get(kind, kind[:-1])), 2)
        if kind in ("things", "animals") and r.random() < 0.3:
            second = self.pick("colors")
        if roll < 0.9:
            return second + " "
        return f"{first}, {second} " if r.random() < 0.5 else f"{first} {second} "

    def np(self, kind: str, plural: bool | None = None, det: str | None = None) -> str:
        """A noun phrase: determiner, adjectives, noun ("my two rusty keys")."""
        r = self.r
        singular, many = r.choice(words(kind)).forms
        mass = many == "-"
        if mass and det in ("a", "#"):
            det = None  # not "a rice" nor "three rice"
        elif det in ("a", "#", "some"):
            plural = det != "a"
        plural = not mass and (r.random() < 0.3 if plural is None else plural)
        det = det or r.choice(MASS_DETS if mass else PLURAL_DETS if plural else SINGULAR_DETS)
        phrase = self.modifiers(kind) + (many if plural else singular)
        if det == "a":
            return _a(phrase)
        if det == "'s":
            return f"{self['first']}'s {phrase}"
        if det == "#":
            return f"{self.small() if r.random() < 0.5 else cardinal(r.randint(2, 12))} {phrase}"
        return f"{det} {phrase}"

    def massfood_noun(self) -> str:
        return self.r.choice([w.forms[0] for w in words("foods") if w.forms[1] == "-"])

    def nouns(self) -> str:
        kind = self.r.choice(("things", "things", "foods", "animals", "people"))
        return self.r.choice([w.forms[1] for w in words(kind) if w.forms[1] != "-"])

    def article_adj_noun(self) -> str:
        return _a(f"{self.adj()} {self.pick('things')}")

    def adj(self) -> str:
        return self.r.choice(_adjectives("thing"))

    def where(self) -> str:
        r = self.r
        if r.random() < 0.3:
            prep = r.choice(("in", "in", "near", "outside", "far from", "on the way to"))
            return f"{prep} {self['place']}"
        venue = r.choice(words("venues"))
        prep = venue.tags[0] if r.random() < 0.7 else r.choice(
            ("near", "behind", "outside", "next to", "across from", "beside", "opposite"))
        det = "the" if r.random() < 0.8 else r.choice(KIN)
        return f"{prep} {det} {self.modifiers('venues')}{venue.forms[0]}"

    def time(self) -> str:
        roll = self.r.random()
        if roll < 0.75:
            return self.pick("times")
        if roll < 0.85:
            return f"at {self.clock()}"
        return f"on {self.date()}" if roll < 0.93 else f"in {self.year()}"

    def adjuncts(self) -> str:
        r = self.r
        options = (self.where, self.time, lambda: self["adv"], self.where,
                   lambda: f"with {self.person()}", lambda: f"for {self.person()}")
        count = r.choices((0, 1, 2), weights=(35, 45, 20))[0]
        return " ".join(f() for f in r.sample(options, count))

    # Numbers, written the ways text writes them.
    def small(self) -> str:
        return str(self.r.randint(2, 99))

    def count(self) -> str:
        r, roll = self.r, self.r.random()
        if roll < 0.6:
            return self.small()
        return str(r.randint(100, 999)) if roll < 0.85 else f"{r.randint(1000, 99_999):,}"

    def big(self) -> str:
        r = self.r
        return r.choice((f"{r.randint(1000, 999_999):,}", f"{r.randint(2, 900)} million",
                         f"{r.randint(2, 99)}.{r.randint(1, 9)} million",
                         f"{r.randint(100, 999)},000"))

    def decimal(self) -> str:
        r = self.r
        return f"{r.randint(0, 20)}.{r.choice((r.randint(1, 9), r.randint(10, 99)))}"

    def year(self) -> str:
        r = self.r
        return str(r.randint(1850, 2049) if r.random() < 0.85 else r.randint(1100, 1849))

    def decade(self) -> str:
        return f"{self.r.randint(185, 203)}0s"

    def clock(self) -> str:
        r, roll = self.r, self.r.random()
        hour, meridiem = r.randint(1, 12), r.choice(("a.m.", "p.m."))
        minute = r.choice(("00", "05", "10", "15", "20", "30", "45", f"{r.randint(0, 59):02d}"))
        if roll < 0.35:
            return f"{hour}:{minute}"
        if roll < 0.5:
            return f"{r.randint(13, 23)}:{minute}"
        if roll < 0.8:
            return f"{hour} {meridiem}"
        return f"{hour}:{minute} {meridiem}" if roll < 0.93 else f"{hour} o'clock"

    def money(self) -> str:
        r = self.r
        cents = f"{r.randint(0, 99):02d}"
        return r.choice((f"${r.randint(1, 99)}.{cents}", f"${r.randint(2, 500)}",
                         f"£{r.randint(1, 99)}.{cents}", f"€{r.randint(2, 300)}",
                         f"${r.randint(1000, 99_999):,}", f"{r.randint(2, 500)} euros",
                         f"{r.randint(2, 99)} dollars", f"{r.randint(2, 99)} cents",
                         f"${r.randint(2, 9)}.{r.randint(1, 9)} million", f"£{r.randint(2, 90)}"))

    def percent(self) -> str:
        r = self.r
        return r.choice((f"{r.randint(1, 99)}%", f"{r.randint(1, 99)}.{r.randint(1, 9)}%",
                         f"{r.randint(2, 99)} percent"))

    def ordinal(self) -> str:
        r = self.r
        return _ordinal(r.randint(1, 31) if r.random() < 0.7 else r.randint(32, 120))

    def date(self) -> str:
        r = self.r
        month, day = r.choice(MONTHS), r.randint(1, 28)
        return r.choice((f"{month} {day}", f"{month} {_ordinal(day)}",
                         f"the {_ordinal(day)} of {month}", f"{month} {day}, {self.year()}"))

    def phone(self) -> str:
        """Digit groups that open with 0, which the frontend reads digit by digit."""
        r = self.r
        sizes = r.choice(((3, 3, 4), (4, 6), (3, 4, 3), (2, 4, 4), (4,)))
        return " ".join("0" + "".join(str(r.randint(0, 9)) for _ in range(n)) for n in sizes)

    def temperature(self) -> str:
        r = self.r
        degrees = r.randint(-20, 40)
        return r.choice((f"{degrees} degrees", f"{degrees}°C", f"{r.randint(10, 99)}°F"))

    # Verbs and clauses.
    def verb(self, transitive: bool = False) -> Word:
        verbs = words("verbs")
        return self.r.choice([v for v in verbs if "none" not in v.tags] if transitive else verbs)

    def obj(self, verb: Word) -> str:
        r = self.r
        kind = r.choice(verb.tags)
        if kind == "none":
            return ""
        if kind == "place":
            return self["place"]
        if kind == "person":
            return r.choice(OBJECT_PRONOUNS) if r.random() < 0.3 else self.person()
        return self.np(kind + "s")

    def subject(self) -> tuple[str, str]:
        """A subject and its agreement: "1s" (I), "3s" (she, the baker) or "pl" (you, we)."""
        r, roll = self.r, self.r.random()
        if roll < 0.35:
            return self.person(), "3s"
        if roll < 0.6:
            return r.choice(PRONOUNS)
        if roll < 0.72:
            return f"{self.name()} and {self.name()}", "pl"
        return (self["people"], "pl") if roll < 0.94 else (self["animal"], "3s")

    def parts(self, agree: str, verb: Word, tense: str) -> tuple[str, str, str]:
        """(auxiliary, main verb, one-word form or ""): ("did", "fix", "fixed")."""
        base, third, past, participle, ing = verb.forms
        be = {"1s": "am", "3s": "is", "pl": "are"}[agree]
        one = agree == "3s"
        return {"past": ("did", base, past),
                "present": ("does" if one else "do", base, third if one else base),
                "future": ("will", base, ""), "progressive": (be, ing, ""),
                "was": ("were" if agree == "pl" else "was", ing, ""),
                "perfect": ("has" if one else "have", participle, ""),
                "modal": (self.r.choice(MODALS), base, ""),
                "going": (be, f"going to {base}", "")}[tense]

    def clause(self, negative: float = 0.15, tense: str | None = None) -> str:
        r = self.r
        subject, agree = self.subject()
        verb = self.verb()
        aux, main, simple = self.parts(agree, verb, tense or r.choice(TENSES))
        if r.random() < negative:
            predicate = f"{NEGATIVE[aux] if r.random() < 0.7 else aux + ' not'} {main}"
        else:
            predicate = simple or f"{aux} {main}"
        return f"{subject} {predicate} {self.obj(verb)} {self.adjuncts()}"

    def question(self, wh: bool) -> str:
        """Auxiliary first ("Has the baker sold ...?"), or a wh-word before it."""
        r = self.r
        subject, agree = self.subject()
        verb = self.verb(transitive=r.random() < 0.8)
        aux, main, _ = self.parts(agree, verb, r.choice(TENSES))
        if not wh:
            return f"{aux} {subject} {main} {self.obj(verb)} {self.adjuncts()}?"
        if r.random() < 0.4 and {"thing", "food"} & set(verb.tags):
            return f"{r.choice(('What', 'Which one'))} {aux} {subject} {main} {self.adjuncts()}?"
        return f"{self['wh_word']} {aux} {subject} {main} {self.obj(verb)}?"


def _stream(seed: int) -> Iterator[str]:
    """Distinct sentences, forever, in an order fixed by `seed`."""
    writer, seen, misses = _Writer(random.Random(seed)), set(), 0
    while misses < MAX_MISSES:
        text = writer.sentence()
        misses = misses + 1 if text in seen else 0
        if not misses:
            seen.add(text)
            yield text
    raise RuntimeError(f"no new sentence in {MAX_MISSES} tries: the grammar is worn out")


def generate(n: int, seed: int) -> list[str]:
    """`n` distinct sentences, the same for the same seed (and a prefix of any longer run)."""
    return list(islice(_stream(seed), n))


def normalized(text: str) -> str:
    """The form two texts are compared in: lower case, no punctuation, single spaces."""
    return " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())


def held_out_texts() -> list[str]:
    """Every line of the lab's sentence sets: evaluation text, never trained on."""
    return [line for name in list_sentence_sets() for line in sentence_set(name)]


@dataclass(frozen=True)
class Split:
    train: list[str]
    held_out: list[str]


def make_split(n_train: int, n_held_out: int, seed: int) -> Split:
    """Held out: the lab's sentence sets, then the first `n_held_out` generated sentences.
    Train: the next `n_train` generated sentences that differ from every held-out one in
    their `normalized` form."""
    stream = _stream(seed)
    held = held_out_texts() + list(islice(stream, n_held_out))
    banned = {normalized(t) for t in held}
    train = list(islice((t for t in stream if normalized(t) not in banned), n_train))
    return Split(train=train, held_out=held)
