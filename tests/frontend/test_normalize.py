import pytest

from lab.frontend import normalize_text
from lab.frontend.normalize import cardinal, ordinal, year


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "zero"),
        (7, "seven"),
        (15, "fifteen"),
        (40, "forty"),
        (99, "ninety nine"),
        (100, "one hundred"),
        (1001, "one thousand one"),
        (1_234_567, "one million two hundred thirty four thousand five hundred sixty seven"),
        (-12, "minus twelve"),
        (10**21, "one zero zero zero zero zero zero zero zero zero zero zero zero zero zero zero "
                 "zero zero zero zero zero zero"),
    ],
)
def test_cardinal(n, words):
    assert cardinal(n) == words


@pytest.mark.parametrize(
    ("n", "words"),
    [(1, "first"), (2, "second"), (3, "third"), (12, "twelfth"), (20, "twentieth"),
     (21, "twenty first"), (108, "one hundred eighth")],
)
def test_ordinal(n, words):
    assert ordinal(n) == words


@pytest.mark.parametrize(
    ("n", "words"),
    [(1999, "nineteen ninety nine"), (1905, "nineteen oh five"), (1900, "nineteen hundred"),
     (2000, "two thousand"), (2007, "two thousand seven"), (2024, "twenty twenty four")],
)
def test_year(n, words):
    assert year(n) == words


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("I have 1,234 apples.", "I have one thousand two hundred thirty four apples."),
        ("Pi is 3.14.", "Pi is three point one four."),
        ("It was -5 outside.", "It was minus five outside."),
        ("It is .5 thick.", "It is point five thick."),
        ("Call 007 now", "Call zero zero seven now"),
        ("the 1st, 2nd, 3rd and 21st", "the first, second, third and twenty first"),
        ("Born in 1999.", "Born in nineteen ninety nine."),
        ("the 1990s and the 80s", "the nineteen nineties and the eighties"),
        ("from 1990\u20131995", "from nineteen ninety to nineteen ninety five"),
        ("Only 1,999 left", "Only one thousand nine hundred ninety nine left"),
        ("COVID-19", "COVID-nineteen"),
        ("items 1,2,3", "items one, two, three"),
    ],
)
def test_numbers(text, spoken):
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("$5", "five dollars"),
        ("$1", "one dollar"),
        ("$3.50", "three dollars and fifty cents"),
        ("$3.5", "three dollars and fifty cents"),
        ("$0.99", "ninety nine cents"),
        ("$0.01", "one cent"),
        ("$1,250", "one thousand two hundred fifty dollars"),
        ("$2.5 million", "two point five million dollars"),
        ("-$4", "minus four dollars"),
        ("£20", "twenty pounds"),
        ("£1.01", "one pound and one penny"),
        ("€12.99", "twelve euros and ninety nine cents"),
        ("It costs $5.", "It costs five dollars."),
    ],
)
def test_currency(text, spoken):
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("3:30 pm", "three thirty PM"),
        ("3:30PM", "three thirty PM"),
        ("14:05", "fourteen oh five"),
        ("14:00", "fourteen hundred"),
        ("3:00", "three o'clock"),
        ("10am", "ten AM"),
        ("at 9 p.m. Then we ate.", "at nine PM. Then we ate."),
        ("at 9 p.m. sharp", "at nine PM sharp"),
        ("12:30:15", "twelve thirty and fifteen seconds"),
        ("ratio 13 pm", "ratio thirteen pm"),
    ],
)
def test_times(text, spoken):
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("50%", "fifty percent"),
        ("12.5 %", "twelve point five percent"),
        ("-3%", "minus three percent"),
        ("a 1999% rise", "a one thousand nine hundred ninety nine percent rise"),
        ("Tom & Jerry", "Tom and Jerry"),
        ("me@home", "me at home"),
        ("2 + 2 = 4", "two plus two equals four"),
        ("It was 20°C", "It was twenty degrees Celsius"),
    ],
)
def test_percent_and_symbols(text, spoken):
    assert normalize_text(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("Dr. Smith", "Doctor Smith"),
        ("Mr. and Mrs. Jones", "Mister and Missus Jones"),
        ("Ms. Lee", "Miz Lee"),
        ("St. Louis", "Saint Louis"),
        ("on Main St. today", "on Main Street today"),
        ("She lives on Main St.", "She lives on Main Street."),
        ("apples, pears, etc.", "apples, pears, et cetera."),
        ("fruit, e.g. plums", "fruit, for example plums"),
        ("olives, e.g. No. 4", "olives, for example number four"),
        ("pears, etc. Then", "pears, et cetera. Then"),
        ("one, i.e. the first", "one, that is the first"),
        ("cats vs. dogs", "cats versus dogs"),
        ("No. 5", "number five"),
        ("No. I refuse.", "No. I refuse."),
        ("John Smith Jr. left", "John Smith Junior left"),
        ("on Jan. 5th", "on January fifth"),
    ],
)
def test_abbreviations(text, spoken):
    assert normalize_text(text) == spoken


def test_whitespace_and_quotes_are_tidied():
    assert normalize_text("  don\u2019t \t  stop \n now  ") == "don't stop now"
    assert normalize_text('"Quoted words," she said') == '"Quoted words," she said'
    assert normalize_text("one , two") == "one, two"
