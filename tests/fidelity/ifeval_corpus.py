"""An IFEval corpus built on the edges of every check, to compare evalflow's verdicts with lm-eval 0.4.13's.

`build(n, seed)` returns at least n items `{"task": "ifeval", "doc": {...}, "response": str, "edge": str}`,
deterministically: docs in google/IFEval's schema with valid kwargs (counts at the bound -1/0/+1 for both
relations, regular-expression keywords, markers and splitters, every language lm-eval knows) and responses
that probe where a check could be approximated: Punkt's sentence boundaries (abbreviations, decimals,
ellipses, quotes, Markdown with bold run-in headings), Treebank word tokens (CANNOT, GONNA, DON'T with a
curly apostrophe, HELLO,WORLD), `\\w` with combining marks and non-Latin scripts, `***` dividers, bullets,
highlights, titles such as `<<>>>`, fenced JSON, postscripts, first/last lines for the loose variants,
blank responses and multi-instruction docs. Edges starting with "random-letter" are docs of the public
set's kind (a `letter` that is no ASCII letter) where lm-eval counts a random letter.
"""

from __future__ import annotations

import random
from collections.abc import Callable

RELATIONS = ("less than", "at least")
Gen = Callable[[random.Random], tuple[list[str], list[dict], str, str]]

# fmt: off
PLAIN = ["The river rose after three days of rain.", "Farmers moved their cattle to higher ground.",
    "Nobody expected the bridge to hold.", "It did, and the town cheered.", "Prices fell by 3.5% in May.",
    "Why would anyone build a house there?", "What a storm it was!", "The mayor promised a new dam.",
    "Children watched from the hill.", "Then the water went down."]
TRICKY = ["Mr. Smith met Dr. Jones at 5 p.m. today.", "The U.S. economy grew in 2023.", "See e.g. the appendix.",
    "She holds a Ph.D. in physics.", "Wait... what happened next?", 'He said "Stop." Then he left.',
    "It costs $4.99 at example.com now.", "J. R. R. Tolkien wrote it.", "Acme Inc. hired him. They paid well.",
    "No!! Really?!", "(This is an aside.)", "Version 2.0.1 ships on Jan. 5.", "She said “Hello.” Then left.",
    "i.e. the end", "St. Louis is on the Mississippi.", "The U.S.A. and the U.K. agreed.", "Is it 3.14? Yes.",
    "Read ch. 3 vs. ch. 4 first.", "He left at 10 a.m. She stayed.", "…and then nothing.",
    "Prof. Lee et al. disagree.", "'Quoted.' Next one.", "Go to www.example.org. It helps."]
MARKDOWN = ["**Overview:** The plan has three parts.", "**Step 1.** Mix the flour and water.", "### Ingredients",
    "* **Tip:** Drink water often.", "- Keep it simple.", "1. Preheat the oven.", "**Note** This matters",
    "> A quote from the book.", "| Name | Value |\n|---|---|\n| A | 1 |", "`code.py` runs here.",
    "**Why it works.** Heat sets the crumb", "---", "## Summary\nIt works.", "*Italic lead.* Then more text."]
CAPS = ["CANNOT", "GONNA", "GOTTA", "WANNA", "DON'T", "DON’T", "HELLO,WORLD", "U.S.A.", "A-OK", "I'M", "OK?",
    "NASA's", "COVID-19", "iPHONE", "ÉCOLE", "ΑΒΓ", "I", "A", "X-RAY", "WON'T", "CAN'T", "'TIS", "Y'ALL", "NO.",
    "(USA)", "**BOLD**", "#HASHTAG", "FAQ:", "3D", "...WAIT", "THE END.", "ЖУК", "HELLO", "IMPORTANT", "WHO'S",
    "LET'S", "“QUOTED”", "GIMME", "N'T", "DO-IT-YOURSELF", "AI/ML", "E.G.", "PH.D.", "MR.", "X"]
WORDISH = ["cafe\u0301", "naïve", "हिन्दी", "தமிழ்", "ภาษาไทย", "日本語", "한국어", "русский", "عربي", "e\u0301te\u0301",
    "Zürich", "x\u0332y", "👍🏽", "a_b", "3.14", "don't", "co-op", "U.S.", "—", "...", "कि", "ক্ষ", "1,000",
    "well-known", "C++", "e-mail", "#tag", "@user", "½", "x²", "Ⅻ", "ǅemal", "ﬁne", "\u200bzero"]
LANG_TEXT = {"en": "The weather is lovely today and we are going for a long walk in the park.",
    "fr": "Il fait très beau aujourd'hui et nous allons faire une longue promenade au parc.",
    "de": "Heute ist das Wetter sehr schön und wir machen einen langen Spaziergang im Park.",
    "es": "Hoy hace muy buen tiempo y vamos a dar un largo paseo por el parque.",
    "it": "Oggi il tempo è bellissimo e faremo una lunga passeggiata nel parco.",
    "pt": "Hoje o tempo está ótimo e vamos dar um longo passeio no parque.",
    "ru": "Сегодня прекрасная погода, и мы идём на долгую прогулку в парк.",
    "uk": "Сьогодні чудова погода, і ми йдемо на довгу прогулянку в парк.",
    "bg": "Днес времето е прекрасно и отиваме на дълга разходка в парка.",
    "ja": "今日はとても良い天気なので、公園で長い散歩をします。",
    "ko": "오늘은 날씨가 아주 좋아서 공원에서 오래 산책을 할 거예요.",
    "hi": "आज मौसम बहुत अच्छा है और हम पार्क में लंबी सैर करने जा रहे हैं।",
    "mr": "आज हवामान खूप छान आहे आणि आम्ही बागेत लांब फिरायला जात आहोत.",
    "ne": "आज मौसम धेरै राम्रो छ र हामी पार्कमा लामो हिँडाइमा जाँदैछौं।",
    "ar": "الطقس جميل جدا اليوم وسنذهب في نزهة طويلة في الحديقة.",
    "fa": "امروز هوا خیلی خوب است و ما به یک پیاده روی طولانی در پارک می رویم.",
    "ur": "آج موسم بہت اچھا ہے اور ہم پارک میں لمبی سیر کے لیے جا رہے ہیں۔",
    "he": "מזג האוויר נפלא היום ואנחנו יוצאים לטיול ארוך בפארק.",
    "bn": "আজ আবহাওয়া খুব সুন্দর এবং আমরা পার্কে লম্বা হাঁটতে যাচ্ছি।",
    "ta": "இன்று வானிலை மிகவும் அழகாக உள்ளது, நாங்கள் பூங்காவில் நீண்ட நடைக்கு செல்கிறோம்.",
    "te": "ఈ రోజు వాతావరణం చాలా బాగుంది మరియు మేము పార్కులో సుదీర్ఘ నడకకు వెళ్తున్నాము.",
    "kn": "ಇಂದು ಹವಾಮಾನ ತುಂಬಾ ಚೆನ್ನಾಗಿದೆ ಮತ್ತು ನಾವು ಉದ್ಯಾನದಲ್ಲಿ ದೀರ್ಘ ನಡಿಗೆಗೆ ಹೋಗುತ್ತಿದ್ದೇವೆ.",
    "gu": "આજે હવામાન ખૂબ સરસ છે અને અમે બગીચામાં લાંબી ચાલવા જઈ રહ્યા છીએ.",
    "pa": "ਅੱਜ ਮੌਸਮ ਬਹੁਤ ਵਧੀਆ ਹੈ ਅਤੇ ਅਸੀਂ ਪਾਰਕ ਵਿੱਚ ਲੰਬੀ ਸੈਰ ਲਈ ਜਾ ਰਹੇ ਹਾਂ।",
    "ml": "ഇന്ന് കാലാവസ്ഥ വളരെ നല്ലതാണ്, ഞങ്ങൾ പാർക്കിൽ ഒരു നീണ്ട നടത്തത്തിന് പോകുന്നു.",
    "th": "วันนี้อากาศดีมากและเรากำลังจะไปเดินเล่นในสวนสาธารณะ",
    "vi": "Hôm nay thời tiết rất đẹp và chúng tôi sẽ đi dạo dài trong công viên.",
    "sw": "Leo hali ya hewa ni nzuri sana na tunaenda kutembea kwa muda mrefu katika bustani.",
    "pl": "Dzisiaj pogoda jest piękna i idziemy na długi spacer do parku.",
    "fi": "Tänään sää on kaunis ja lähdemme pitkälle kävelylle puistoon."}
AMBIGUOUS = ["OK", "Hola", "Merci!", "123", "😀", "https://example.com", "Ciao ciao", "No.", "Sí", "Danke", "a",
    "Taxi", "Pizza pasta", "Hotel Bar", "ok ok ok", "Nein nein", "Amen", "Sushi", "Bravo!", "fin"]
# fmt: on
PREAMBLES = ["Sure! Here is my answer:", "Certainly.", "**Answer**", "Here you go:", "<<Draft>>", "```"]
CLOSINGS = ["Let me know if you need anything else!", "Hope this helps.", "```", "*End*", "P.S. Thanks!", '"']


def _bound(rng: random.Random, count: int) -> int:
    return max(1, count + rng.choice((-2, -1, -1, 0, 0, 0, 1, 1, 2)))


def _sentences(rng: random.Random, k: int, tricky: float = 0.5) -> list[str]:
    return [rng.choice(TRICKY if rng.random() < tricky else PLAIN) for _ in range(k)]


def _prose(rng: random.Random, k: int) -> str:
    """k units of prose, Markdown or tricky sentences, joined by spaces or line breaks."""
    units = [rng.choice(MARKDOWN) if rng.random() < 0.3 else s for s in _sentences(rng, k)]
    out = units[0]
    for u in units[1:]:
        out += rng.choice((" ", " ", "\n", "\n\n", "  "))
        out += u
    return out


def realistic(rng: random.Random) -> str:
    """A model-like Markdown answer: intro, bold run-in headings, bullets, a closing line."""
    parts = [rng.choice(PLAIN)]
    for _ in range(rng.randint(1, 4)):
        head = rng.choice(["Overview", "Step 1", "Why it matters", "Tip", "Key idea", "Cost"])
        parts.append(f"**{head}:** {' '.join(_sentences(rng, rng.randint(1, 3)))}")
        if rng.random() < 0.5:
            parts.append("\n".join(f"* {rng.choice(PLAIN)}" for _ in range(rng.randint(1, 3))))
    parts.append(rng.choice(CLOSINGS + PLAIN))
    return "\n\n".join(parts)


# --- one generator per instruction id: (ids, kwargs, response, edge) --------------------------------------

# fmt: off
KEYWORD_FORMS = {"c.t": ["cat", "c.t", "cut", "CT"], "colou?r": ["color", "colour", "colou?r", "COLOR"],
    "U.S.": ["U.S.", "USAS", "u.s"], "(fun)": ["fun", "(fun)", "funny"],
    "night|day": ["night", "day", "nightday", "n1ght"], "[ch]at": ["cat", "hat", "[ch]at"],
    "x\\d": ["x1", "x\\d", "X9"], "c++": ["c", "C++", "k"], "naïve": ["naïve", "naive", "NAÏVE"],
    "le": ["le", "table", "LE"], "fog": ["fog", "Fog", "FOGGY", "f*og"],
    "lantern": ["lantern", "*lantern*", "lan tern"], "café": ["café", "cafe\u0301", "CAFÉ"],
    "e-mail": ["e-mail", "email", "E-MAIL"], "sarah": ["Sarah", "sarah's", "sara"],
    "\\bwar\\b": ["war", "software", "WAR!"]}
# fmt: on


def existence(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    kws = rng.sample(sorted(KEYWORD_FORMS), rng.randint(1, 3))
    words = [rng.choice(KEYWORD_FORMS[k]) for k in kws]
    text = _prose(rng, 2)
    for w in words:
        text = text.replace(" ", f" {w} ", 1) if rng.random() < 0.85 else text
    return ["keywords:existence"], [{"keywords": kws}], text, "forms of " + "/".join(kws)


FREQ = ["war", "story", " the ", "aa", "c.t", "fake", "ai", "Tree", "s\\w+", "it's", "na"]


def frequency(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    kw = rng.choice(FREQ)
    forms = {"war": ["war", "WAR", "software", "wars"], "aa": ["aaa", "aa", "a a"], "c.t": ["cat", "cut", "c.t"]}
    k = rng.randint(0, 6)
    units = [rng.choice(forms.get(kw, [kw.strip(), kw.strip().upper(), kw.strip() + "s"])) for _ in range(k)]
    text = " ".join(rng.sample(units + _sentences(rng, 3), k + 3))
    kwargs = {"keyword": kw, "frequency": _bound(rng, k), "relation": rng.choice(RELATIONS)}
    return ["keywords:frequency"], [kwargs], text, f"keyword {kw.strip()!r} around its bound"


# fmt: off
FORBIDDEN = {"cat": ["cats", "cat's", "_cat", "catalog", "CAT", "(cat)", "*cat*", "concat"],
    "run": ["running", "run-up", "RUN."], "c.t": ["cut", "c t", "cat5"], "night": ["nightly", "night.", "midnight"],
    "café": ["café", "cafe", "cafés"], "BC": ["bc", "ABC", "B.C."], "no": ["No", "know", "no-go", "n o"],
    "e-mail": ["email", "e-mails", "e-mail"], "yes|no": ["yes", "yesterday", "nope"],
    "name": ["rename", "name", "names", "NAME!"]}
# fmt: on


def forbidden(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    words = rng.sample(sorted(FORBIDDEN), rng.randint(1, 3))
    forms = [rng.choice(FORBIDDEN[w]) for w in words]
    text = " ".join([*_sentences(rng, 2, 0.2), *rng.sample(forms, rng.randint(0, len(forms)))])
    return ["keywords:forbidden_words"], [{"forbidden_words": words * rng.choice((1, 1, 2))}], text, "word boundary"


def letter(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    if rng.random() < 0.03:  # the public set's keys 1122 and 1129: lm-eval counts a random letter
        char = rng.choice("#!")
        text = realistic(rng) + char * rng.randint(0, 8)
        kwargs = {"letter": char, "let_frequency": 4, "let_relation": "at least"}
        return ["keywords:letter_frequency"], [kwargs], text, "random-letter: not an ASCII letter"
    char = rng.choice("aeitqzjlAEZ")
    text = rng.choice([_prose(rng, 2), realistic(rng), "Élan éclair ÉTÉ", "Ⓐ ä à a A", "zzZ Zz"])
    count = text.lower().count(char.lower())
    kwargs = {"letter": char, "let_frequency": _bound(rng, count), "let_relation": rng.choice(RELATIONS)}
    return ["keywords:letter_frequency"], [kwargs], text, f"letter {char} around its count"


def language(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    code = rng.choice(sorted(LANG_TEXT))
    mode = rng.choice(["same", "same", "other", "short", "mixed", "markdown"])
    text = {
        "same": LANG_TEXT[code],
        "other": LANG_TEXT[rng.choice(sorted(LANG_TEXT))],
        "short": rng.choice(AMBIGUOUS),
        "mixed": LANG_TEXT[code] + " " + LANG_TEXT["en"],
        "markdown": f"**{LANG_TEXT[code][:20]}**\n* {LANG_TEXT[code]}\n[1] https://x.org",
    }[mode]
    return ["language:response_language"], [{"language": code}], text, f"language {mode}"


def sentences(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    k = rng.randint(1, 8)
    text = realistic(rng) if rng.random() < 0.3 else _prose(rng, k)
    kwargs = {"num_sentences": _bound(rng, k), "relation": rng.choice(RELATIONS)}
    return ["length_constraints:number_sentences"], [kwargs], text, "sentences: abbreviations/markdown"


DIVIDERS = ["\n***\n", "\n\n***\n\n", " *** ", "***", "\n****\n", "\n* * *\n", "\n***\n\n***\n", "\n---\n", "\n *** \n"]


def paragraphs(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    k = rng.randint(1, 5)
    parts = [_prose(rng, rng.randint(1, 2)) for _ in range(k)]
    divider = rng.choice(DIVIDERS)
    text = divider.join(parts)
    text = rng.choice(("", "", "***\n", "\n***")) + text + rng.choice(("", "", "\n***", "***", "\n***\n"))
    edge = f"divider {divider.strip() or 'space'!r}"
    return ["length_constraints:number_paragraphs"], [{"num_paragraphs": _bound(rng, k)}], text, edge


def words(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    k = rng.randint(1, 12)
    units = [rng.choice(WORDISH) if rng.random() < 0.5 else rng.choice(PLAIN).split()[0] for _ in range(k)]
    text = " ".join(units)
    kwargs = {"num_words": _bound(rng, k), "relation": rng.choice(RELATIONS)}
    return ["length_constraints:number_words"], [kwargs], text, "words with marks/scripts"


# fmt: off
FIRST = ["Today", '"Today', "'Today", "**Today**", "Today,", "Today's", "TODAY", "Today-ish", "#Today", "“Today",
    "today."]
# fmt: on


def nth_paragraph(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    k = rng.randint(1, 5)
    parts = [_prose(rng, 1) for _ in range(k)]
    nth = rng.randint(1, k)
    form = rng.choice(FIRST)
    parts[nth - 1] = form + " " + parts[nth - 1]
    text = rng.choice(("\n\n", "\n\n", "\n\n\n", "\n \n", "\n")).join(parts) + rng.choice(("", "\n\n", "\n"))
    num = _bound(rng, k)
    kwargs = {"num_paragraphs": num, "nth_paragraph": min(nth, num), "first_word": rng.choice(("today", "Today"))}
    return ["length_constraints:nth_paragraph_first_word"], [kwargs], text, f"first word {form!r}"


PLACEHOLDERS = ["[name]", "[ ]", "[]", "[a [b] c]", "[link](http://x.org)", "[multi\nline]", "[[x]]", "[日付]", "]["]


def placeholders(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    k = rng.randint(0, 6)
    units = [rng.choice(PLACEHOLDERS) for _ in range(k)]
    text = " ".join(rng.sample(units + _sentences(rng, 2), k + 2))
    return ["detectable_content:number_placeholders"], [{"num_placeholders": _bound(rng, k)}], text, "placeholders"


# fmt: off
PS = ["P.S. Bring a hat.", "p.s. bring a hat", "P. S. Hat.", "PS: hat", "P.P.S. Hat.", "P. P. S hat", "P.S.S. hat",
    "see the P.S. below", "P.S: hat", "maps.s.x", "P.S", "NB: hat", "Note: hat", "P.P.S", "**P.S.** Hat"]
# fmt: on


def postscript(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    marker = rng.choice(["P.S.", "P.S.", "P.P.S", "P.P.S", "P.S", "NB:", " P.S. ", "Note"])
    ps = rng.choice(PS)
    text = realistic(rng) + rng.choice(("\n\n", "\n", " ")) + ps
    return ["detectable_content:postscript"], [{"postscript_marker": marker}], text, f"{marker.strip()} vs {ps[:8]!r}"


# fmt: off
BULLETS = ["* item", "- item", "*item", "** bold", "**Bold:** x", "  * nested", "\t- tab", "• dot", "1. one", "---",
    "-5 degrees", "* ", "+ plus", " -dash", "*** rule"]
# fmt: on


def bullets(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    lines = [rng.choice(BULLETS) for _ in range(rng.randint(1, 7))]
    k = sum(ln.lstrip().startswith(("* ", "- ", "-")) for ln in lines)
    text = rng.choice(PLAIN) + "\n" + "\n".join(lines) + rng.choice(("", "\n" + rng.choice(PLAIN)))
    return ["detectable_format:number_bullet_lists"], [{"num_bullets": _bound(rng, k)}], text, "bullet styles"


# fmt: off
CONSTRAINED = ["My answer is yes.", "My answer is no", "my answer is maybe.", "My answer is maybe.",
    "My answer is: yes.", "**My answer is yes.**", "My answer is no.\nBecause.", "“My answer is yes.”",
    "My  answer is no."]
# fmt: on


def constrained(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    choice = rng.choice(CONSTRAINED)
    text = rng.choice(("", rng.choice(PLAIN) + " ", "Let me think.\n")) + choice
    return ["detectable_format:constrained_response"], [{}], text, f"option {choice[:22]!r}"


HIGHLIGHTS = ["*x*", "**x**", "** **", "***x***", "*x\ny*", "* item", "**", "*a* *b*", "__x__", "*one two*", "* *"]


def highlights(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    units = [rng.choice(HIGHLIGHTS) for _ in range(rng.randint(0, 5))]
    text = " ".join(rng.sample(units + _sentences(rng, 2, 0.2), len(units) + 2))
    k = sum(u in ("*x*", "**x**", "*one two*") for u in units) + 2 * units.count("*a* *b*")
    return ["detectable_format:number_highlighted_sections"], [{"num_highlights": _bound(rng, k)}], text, "highlights"


# fmt: off
OPENERS = ["Section {n}", "SECTION {n}", "Section{n}", "section {n}", "Section X", "Section {n}:", "**Section {n}**",
    "Day {n}", "PARAGRAPH {n}", "Part {n}", "Chapter {n}", "Section  {n}"]
# fmt: on


def sections(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    spliter = rng.choice(["Section", "SECTION", "Day", "PARAGRAPH", " Section ", "Part", "Sect.on", "Chapter"])
    form = rng.choice(OPENERS)
    k = rng.randint(1, 5)
    text = "\n".join(form.format(n=i + 1) + "\n" + _prose(rng, 1) for i in range(k))
    kwargs = {"section_spliter": spliter, "num_sections": _bound(rng, k)}
    return ["detectable_format:multiple_sections"], [kwargs], text, f"{spliter.strip()} vs {form.format(n=1)!r}"


JSONS = ['{"a": 1}', "[1, 2]", "42", '"text"', "{'a': 1}", '{"a": 1,}', "null", '{"a": "b"} trailing', "true"]
# fmt: off
FENCES = [("```json\n", "\n```"), ("```JSON\n", "\n```"), ("```Json\n", "```"), ("```\n", "\n```"), ("", ""),
    ("```python\n", "\n```"), ("Here:\n```json\n", "\n```"), ("```json\n", ""), (" ```json", "```  ")]
# fmt: on


def json_format(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    body, (start, end) = rng.choice(JSONS), rng.choice(FENCES)
    return ["detectable_format:json_format"], [{}], start + body + end, f"json {start.strip()[:9]!r}"


# fmt: off
TITLES = ["<<Autumn>>", "<<>>", "<<>>>", "<< >>", "<<<a>>>", "<<a <<b>> c>>", "<<a\nb>>", "<< >>>", "<<<>>", "<>",
    "«Title»", "<<**Bold**>>", "<<a>> <<>>", "< <x> >", "<<\t>>", ">>x<<"]
# fmt: on


def title(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    t = rng.choice(TITLES)
    text = rng.choice((t + "\n" + _prose(rng, 2), _prose(rng, 1) + " " + t, t))
    return ["detectable_format:title"], [{}], text, f"title {t!r}"


def two_responses(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    a, b = rng.choice(PLAIN), rng.choice(PLAIN)
    sep = rng.choice(["\n******\n", "******", "\n*******\n", "\n***\n", "\n******\n******\n", " ****** "])
    text = rng.choice((a + sep + b, a + sep + a, sep + a + sep + b, a + sep + b + sep, a + sep + b + sep + a))
    return ["combination:two_responses"], [{}], text, f"separator {sep.strip()!r}"


PROMPTS = ["Write a poem about the sea.", "Name three uses of a paper clip.", 'Rewrite "Hi." formally.']


def repeat_prompt(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    p = rng.choice(PROMPTS)
    text = rng.choice((p, p.upper(), "  " + p, "Sure! " + p, p[:-1], p.replace(" ", "  "))) + " " + rng.choice(PLAIN)
    return ["combination:repeat_prompt"], [{"prompt_to_repeat": rng.choice((p, " " + p + " "))}], text, "repeat"


ENDS = ["Is there anything else I can help with?", "That is all you need!", "Peace!", "in India.", " Stay dry. "]


def end_checker(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    phrase = rng.choice(ENDS)
    tail = rng.choice(("", " ", "\n", '"', '."', "!", " \n\n", "**", "'", " Bye."))
    text = realistic(rng) + "\n" + rng.choice((phrase.strip(), phrase.strip().upper(), phrase.strip()[:-1])) + tail
    return ["startend:end_checker"], [{"end_phrase": phrase}], text, f"end + {tail!r}"


def quotation(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    body = rng.choice(PLAIN)
    text = rng.choice((f'"{body}"', f"“{body}”", f' "{body}"\n', '"', '""', f'"{body}', f"'{body}'", f'"{body}"!'))
    return ["startend:quotation"], [{}], text, "quotes"


def capital(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    units = [rng.choice(CAPS) for _ in range(rng.randint(0, 6))]
    text = " ".join(rng.sample(units + _sentences(rng, 2), len(units) + 2))
    kwargs = {"capital_frequency": _bound(rng, len(units)), "capital_relation": rng.choice(RELATIONS)}
    return ["change_case:capital_word_frequency"], [kwargs], text, "capital tokens"


def case(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    iid = rng.choice(["change_case:english_capital", "change_case:english_lowercase"])
    text = rng.choice(
        [LANG_TEXT["en"], LANG_TEXT[rng.choice(sorted(LANG_TEXT))], rng.choice(AMBIGUOUS), realistic(rng)]
    )
    text = rng.choice((text.upper(), text.lower(), text))
    return [iid], [{}], text, iid.split(":")[1]


def no_comma(rng: random.Random) -> tuple[list[str], list[dict], str, str]:
    mark = rng.choice([",", "，", "、", "‚", "", "", "٫"])
    return ["punctuation:no_comma"], [{}], rng.choice(PLAIN)[:-1] + mark + " then more.", f"comma {mark!r}"


# fmt: off
GENERATORS: list[Gen] = [existence, frequency, forbidden, letter, language, sentences, paragraphs, words,
    nth_paragraph, placeholders, postscript, bullets, constrained, highlights, sections, json_format, title,
    two_responses, repeat_prompt, end_checker, quotation, capital, case, no_comma]
# fmt: on


def _loose(rng: random.Random, text: str) -> tuple[str, str]:
    """Wrap a response in a preamble and/or closing line (what the loose variants drop), or not."""
    mode = rng.choice(("", "", "", "preamble", "closing", "both", "stars"))
    if mode in ("preamble", "both"):
        text = rng.choice(PREAMBLES) + "\n" + text
    if mode in ("closing", "both"):
        text = text + "\n" + rng.choice(CLOSINGS)
    if mode == "stars":
        text = "**" + text.replace(" ", "** **", 1) + "**"
    return text, mode and f" +{mode}"


def build(n: int = 10_000, seed: int = 0) -> list[dict]:
    """At least n items, the same for the same (n, seed)."""
    rng = random.Random(seed)
    items: list[dict] = []
    while len(items) < n:
        for gen in GENERATORS:
            ids, kwargs, text, edge = gen(rng)
            if rng.random() < 0.2:  # a multi-instruction doc: other checks on the same response
                for other in rng.sample(GENERATORS, rng.randint(1, 2)):
                    more_ids, more_kwargs, more_text, _ = other(rng)
                    ids, kwargs = ids + more_ids, kwargs + more_kwargs
                    text = text + rng.choice(("\n\n", "\n", " ")) + more_text if rng.random() < 0.5 else text
                edge = "multi: " + edge
            text, wrap = _loose(rng, text)
            if rng.random() < 0.01:
                text, edge = rng.choice(("", " ", "\n\n", "\t \n")), "blank response"
            prompt = kwargs[0].get("prompt_to_repeat", f"Prompt {len(items)}: follow the instructions.")
            doc = {"key": len(items), "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}
            items.append({"task": "ifeval", "doc": doc, "response": text, "edge": edge + wrap})
    return items
