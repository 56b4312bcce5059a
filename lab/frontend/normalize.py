"""Rewrite written English into the words a speaker would say.

espeak-ng reads digits and a few symbols on its own, but it reads "$3.50" as "dollar three point
five zero" and "Dr." as the end of a sentence. Doing these rewrites here, before phonemization,
keeps the readings predictable and the same for every acoustic model in the lab.
"""

from __future__ import annotations

import re
import unicodedata

ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
SCALES = ("", "thousand", "million", "billion", "trillion", "quadrillion", "quintillion")
IRREGULAR_ORDINALS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}

TITLES = {
    "Mr": "Mister",
    "Mrs": "Missus",
    "Ms": "Miz",
    "Dr": "Doctor",
    "Prof": "Professor",
    "Mt": "Mount",
}
MONTHS = {
    "Jan": "January",
    "Feb": "February",
    "Mar": "March",
    "Apr": "April",
    "Jun": "June",
    "Jul": "July",
    "Aug": "August",
    "Sep": "September",
    "Sept": "September",
    "Oct": "October",
    "Nov": "November",
    "Dec": "December",
}
ENDINGS = {
    "Sr": "Senior",
    "Jr": "Junior",
    "Ave": "Avenue",
    "Rd": "Road",
    "Blvd": "Boulevard",
    "Inc": "Incorporated",
    "Ltd": "Limited",
    **MONTHS,
}
LATIN = {"etc": "et cetera", "e.g": "for example", "i.e": "that is", "vs": "versus"}
CURRENCIES = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
}
SYMBOLS = {"&": "and", "@": "at", "%": "percent", "+": "plus", "=": "equals", "°": "degrees"}
TEMPERATURE_SCALES = {"C": "Celsius", "F": "Fahrenheit"}
PUNCTUATION_MAP = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                                 "\u2212": "-", "\t": " "})


def cardinal(n: int) -> str:
    """Integer as words, American style without "and"; past the quintillions, digit by digit."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n == 0:
        return "zero"
    if n >= 1000 ** len(SCALES):
        return digit_words(str(n))
    groups = []
    while n:
        n, group = divmod(n, 1000)
        groups.append(group)
    words: list[str] = []
    for scale in reversed(range(len(groups))):
        if groups[scale]:
            words += _below_thousand(groups[scale])
            if scale:
                words.append(SCALES[scale])
    return " ".join(words)


def _below_thousand(n: int) -> list[str]:
    hundreds, rest = divmod(n, 100)
    words = [ONES[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        words.append(TENS[rest // 10])
        if rest % 10:
            words.append(ONES[rest % 10])
    elif rest:
        words.append(ONES[rest])
    return words


def digit_words(digits: str) -> str:
    return " ".join(ONES[int(d)] for d in digits)


def ordinal(n: int) -> str:
    words = cardinal(n).split()
    last = words[-1]
    if last in IRREGULAR_ORDINALS:
        words[-1] = IRREGULAR_ORDINALS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def year(n: int) -> str:
    """Read a year in pairs ("nineteen ninety nine"), the way people say years, not counts."""
    high, low = divmod(n, 100)
    if n % 1000 == 0 or 2000 <= n <= 2009:
        return cardinal(n)
    if low == 0:
        return f"{cardinal(high)} hundred"
    if low < 10:
        return f"{cardinal(high)} oh {ONES[low]}"
    return f"{cardinal(high)} {cardinal(low)}"


def is_year(digits: str) -> bool:
    return len(digits) == 4 and 1100 <= int(digits) <= 2099


def number(raw: str, years: bool = True) -> str:
    """A written number ("-1,234.50", "007", "1999") as words."""
    sign = "minus " if raw.startswith("-") else ""
    whole, _, fraction = raw.lstrip("-").partition(".")
    whole = whole.replace(",", "")
    if not whole:
        words = ""
    elif len(whole) > 1 and whole.startswith("0"):
        words = digit_words(whole)
    elif years and not sign and not fraction and is_year(whole) and "," not in raw:
        words = year(int(whole))
    else:
        words = cardinal(int(whole))
    if fraction:
        words = f"{words} point {digit_words(fraction)}".strip()
    return sign + words


def _plural(words: str) -> str:
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return f"{head} {last}".strip()


def _keeps_period(text: str, end: int, before_capital: bool = True) -> bool:
    """Whether a period eaten with an abbreviation also ended the sentence.

    At the end of the text it always did; before a capital it did for words that can close a
    sentence ("etc.", "Jr."), but not for ones that introduce what follows ("e.g.").
    """
    rest = text[end:]
    if not rest.strip():
        return True
    return before_capital and bool(re.match(r"\s+[\"'(]?[A-Z]", rest))


def _abbreviation(word: str, text: str, match: re.Match, before_capital: bool = True) -> str:
    return word + ("." if _keeps_period(text, match.end(), before_capital) else "")


def _saint_or_street(text: str, match: re.Match) -> str:
    before = text[: match.start()].split()
    after_capital = re.match(r"\s+[A-Z]", text[match.end():])
    previous_capital = bool(before) and before[-1][:1].isupper()
    if after_capital and not previous_capital:
        return "Saint"
    return _abbreviation("Street", text, match)


def expand_abbreviations(text: str) -> str:
    titles = "|".join(TITLES)
    text = re.sub(rf"\b({titles})\.", lambda m: TITLES[m[1]], text)
    endings = "|".join(ENDINGS)
    text = re.sub(rf"\b({endings})\.", lambda m: _abbreviation(ENDINGS[m[1]], text, m), text)
    text = re.sub(r"\bSt\.", lambda m: _saint_or_street(text, m), text)
    latin = "|".join(re.escape(k) for k in LATIN)
    text = re.sub(
        rf"(?<![\w.])({latin})\.",
        lambda m: _abbreviation(LATIN[m[1].lower()], text, m, m[1].lower() == "etc"),
        text,
        flags=re.IGNORECASE,
    )
    return re.sub(r"\b[Nn]o\.\s?(?=\d)|#(?=\d)", "number ", text)


CURRENCY = re.compile(
    r"(?P<sign>-)?(?P<symbol>[$£€])\s?(?P<amount>\d[\d,]*(?:\.\d+)?)"
    r"(?:\s?(?P<scale>thousand|million|billion|trillion)\b)?"
)


def _currency(match: re.Match) -> str:
    one, many, cent, cents = CURRENCIES[match["symbol"]]
    sign = "minus " if match["sign"] else ""
    amount = match["amount"].rstrip(",")
    tail = match["amount"][len(amount):]
    whole, _, fraction = amount.partition(".")
    value = int(whole.replace(",", ""))
    if match["scale"]:
        return f"{sign}{number(amount, years=False)} {match['scale']} {many}{tail}"
    if len(fraction) > 2:
        return f"{sign}{number(amount, years=False)} {many}{tail}"
    main = f"{cardinal(value)} {one if value == 1 else many}"
    small = int(fraction.ljust(2, "0")) if fraction else 0
    if small == 0:
        return f"{sign}{main}{tail}"
    change = f"{cardinal(small)} {cent if small == 1 else cents}"
    return f"{sign}{change if value == 0 else main + ' and ' + change}{tail}"


TIME = re.compile(
    r"\b(?P<hour>\d{1,2}):(?P<minute>[0-5]\d)(?::(?P<second>[0-5]\d))?"
    r"(?:\s?(?P<meridiem>[AaPp])\.?\s?[Mm]\b\.?)?"
)
HOUR_MERIDIEM = re.compile(r"\b(?P<hour>\d{1,2})\s?(?P<meridiem>[AaPp])\.?\s?[Mm]\b\.?")


def _time(text: str, match: re.Match) -> str:
    hour = int(match["hour"])
    minute = int(match.groupdict().get("minute") or 0)
    meridiem = match["meridiem"]
    if hour > 24 or (meridiem and not 1 <= hour <= 12):
        return match[0]
    words = [cardinal(hour)]
    if minute:
        words.append(f"oh {ONES[minute]}" if minute < 10 else cardinal(minute))
    elif not meridiem:
        words.append("hundred" if hour > 12 or hour == 0 else "o'clock")
    second = match.groupdict().get("second")
    if second and int(second):
        words.append(f"and {cardinal(int(second))} second{'' if int(second) == 1 else 's'}")
    if meridiem:
        words.append(meridiem.upper() + "M")
        if match[0].endswith(".") and _keeps_period(text, match.end()):
            words[-1] += "."
    return " ".join(words)


NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
PERCENT = re.compile(rf"(?<![\w.])(?P<amount>-?(?:{NUMBER}))\s?%")
ORDINAL = re.compile(r"(?<![\w.])(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th)\b", re.IGNORECASE)
DECADE = re.compile(r"(?<![\w.])(?P<apostrophe>')?(?P<n>\d{2}|\d{4})'?s\b")
BARE_NUMBER = re.compile(rf"(?<![\w.])(?P<amount>-?(?:{NUMBER})|\.\d+)")


def _decade(match: re.Match) -> str:
    digits = match["n"]
    if len(digits) == 4 and is_year(digits) and digits.endswith("0"):
        return _plural(year(int(digits)))
    if len(digits) == 2 and digits[0] != "0" and digits.endswith("0"):
        return _plural(cardinal(int(digits)))
    return match[0]


def expand_numbers(text: str) -> str:
    text = re.sub(r"(?<=\d)\s?[\u2013\u2014]\s?(?=\d)", " to ", text)
    text = CURRENCY.sub(_currency, text)
    text = TIME.sub(lambda m: _time(text, m), text)
    text = HOUR_MERIDIEM.sub(lambda m: _time(text, m), text)
    text = PERCENT.sub(lambda m: number(m["amount"], years=False) + " percent", text)
    text = ORDINAL.sub(lambda m: ordinal(int(m["n"].replace(",", ""))), text)
    text = DECADE.sub(_decade, text)
    return BARE_NUMBER.sub(lambda m: number(m["amount"]), text)


def expand_symbols(text: str) -> str:
    text = re.sub(r"°\s?([CF])\b", lambda m: f" degrees {TEMPERATURE_SCALES[m[1]]}", text)
    pattern = "[" + re.escape("".join(SYMBOLS)) + "]"
    return re.sub(pattern, lambda m: f" {SYMBOLS[m[0]]} ", text)


def normalize_text(text: str) -> str:
    """Spell out numbers, money, times, abbreviations and symbols; tidy whitespace.

    Abbreviations go first so that "No. 5" still sees its digit, and money and times go
    before bare numbers so that "$3.50" and "3:30" are read as one amount, not three numbers.
    """
    text = unicodedata.normalize("NFKC", text).translate(PUNCTUATION_MAP)
    text = expand_abbreviations(text)
    text = expand_numbers(text)
    text = expand_symbols(text)
    text = re.sub(r"[ ]+([,.;:!?])", r"\1", text)
    text = re.sub(r"(?<=\w),(?=[^\W\d_])", ", ", text)
    return re.sub(r"\s+", " ", text).strip()
