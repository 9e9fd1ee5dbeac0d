"""The verbalized-confidence grammar (spec Sec. III, read-out 3) and how a continuation ended.

The main prompt asks the model for its confidence after the answer; the greedy
continuation of ``readout.verbal_max_new_tokens`` (12) tokens is read by
:func:`parse_verbal_confidence` (the integer after "Confidence:", divided by 100;
NaN when not parsed). ``verbal_stop`` records how the continuation ended
(:func:`continuation_stop`): :data:`VERBAL_STOP_EOS` = 0 at an end-of-sequence
token, :data:`VERBAL_STOP_LIMIT` = 1 at the token limit. A number that touches the
end of a continuation cut by the limit is missing (real tokenizers split digits:
``"Confidence: 100"`` cut after 12 tokens reads ``"Confidence: 10"``).

Text and token ids in, numbers out: no model, no tokenizer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

__all__ = ["DECODING", "VERBAL_STOP_EOS", "VERBAL_STOP_LIMIT", "parse_verbal_confidence", "continuation_stop", "until_eos"]

#: how every continuation is decoded (spec Table III): greedily, the most probable token at each step
#: (the batched engine and the whole-prompt reference of murk.readout take the argmax; a checkpoint's sampling settings are ignored and recorded,
#: murk.readout). Not a setting: the only decoding murk implements.
DECODING = "greedy"

#: ``verbal_stop`` coding: the continuation ended with an end-of-sequence token
VERBAL_STOP_EOS = 0.0
#: ``verbal_stop`` coding: the continuation ran to ``readout.verbal_max_new_tokens`` tokens
VERBAL_STOP_LIMIT = 1.0


# the label: "Confidence", "Confidence level", "Confidence score", "Confidence rating", optionally
# with a parenthesised range ("Confidence (0-100)") and Markdown emphasis ("**Confidence:**"),
# then a colon
_LABEL_RE = re.compile(
    r"(?<![A-Za-z])confidence(?:[ \t]+(?:level|score|rating))?[ \t]*(?:\([^()\n]{0,24}\))?[ \t]*[*_]{0,3}[ \t]*[:：]"
    r"[ \t*_]*", re.IGNORECASE)
# a number as written: sign, digits, decimal part, exponent (classified below)
_NUMBER_RE = re.compile(r"(?P<sign>[-+−])?(?P<int>\d+)(?P<frac>[.,]\d+)?(?P<exp>[eE][-+]?\d+)?")
_RANGE_RE = re.compile(r"[ \t]*(?:-|–|—|to)[ \t]*\d", re.IGNORECASE)
_FRACTION_RE = re.compile(r"[ \t]*(?:/|out[ \t]+of)[ \t]*(?P<den>\d+)", re.IGNORECASE)
_PERCENT_RE = re.compile(r"[ \t]*%")
# what may follow a value cut by the token limit and still turn it into a decimal, a fraction,
# a range or another number: then the value "touches the end" and is missing
_OPEN_END_RE = re.compile(
    r"[ \t*_]*(?:[.,/\-–—][ \t]*\d*"                          # a decimal, fraction or range begun
    r"|o(?:u(?:t(?:[ \t]+(?:o(?:f(?:[ \t]*\d*)?)?)?)?)?)?"      # "out of N" begun
    r"|t(?:o(?:[ \t]*\d*)?)?)?[ \t*_]*",                       # "to N" begun
    re.IGNORECASE)


def parse_verbal_confidence(text: str, truncated: bool = False) -> float:
    """The verbalized confidence: the integer after "Confidence:" divided by 100.

    Grammar (case-insensitive; spec Sec. III: "the integer after 'Confidence:'
    ... unparsed outputs are kept as missing")::

        label  := EMPH? "confidence" [" level" | " score" | " rating"] ["(" range ")"] EMPH? ":" EMPH?
        value  := EMPH? INTEGER ["%" | "/100" | " out of 100"] EMPH?
        EMPH   := "*" | "**" | "_" | "__"        (Markdown emphasis)

    * The first label followed by a value decides. A label followed by an
      echoed range (``0 to 100``, ``0-100``, ``0–100``) or by no number at all
      (``<a number from 0 to 100>``, ``high``) is skipped and the next label is
      tried.
    * INTEGER is 0-100 written with at most three digits. A decimal (``0.85``,
      ``85.5``), an exponent (``1e2``), a sign (``-5``), a value above 100, a
      fraction other than ``/100`` (``8/10``, ``8 out of 10``) is missing: none
      of them is read as a percentage.
    * ``truncated``: the continuation stopped at the token limit. A value that
      touches its end is missing, because the cut may have removed digits
      (``"Confidence: 10"`` from ``"Confidence: 100"``) or a decimal, fraction or
      range part: the value counts only if something follows it that cannot
      continue it (a newline, a letter other than the start of "out of" / "to",
      a bracket...).

    ==================================  =========  ==========
    text                                value      truncated
    ==================================  =========  ==========
    ``Confidence: 85``                  0.85       NaN
    ``Confidence: 85\n``                0.85       0.85
    ``**Confidence:** 85%``             0.85       NaN
    ``Confidence level: 85/100``        0.85       NaN
    ``Confidence (0-100): 85.``         0.85       NaN
    ``Confidence: 0 to 100\nConfidence: 90\n``  0.90  0.90
    ``Confidence: 0.85`` / ``1e2``       NaN        NaN
    ``Confidence: 8 out of 10``         NaN        NaN
    ==================================  =========  ==========

    Parameters
    ----------
    text : str
        The generated continuation (special tokens removed).
    truncated : bool
        True if the continuation ended at the token limit (``verbal_stop`` = 1).

    Returns
    -------
    float
        In [0, 1] (multiples of 0.01); NaN when missing.

    >>> parse_verbal_confidence("B\\nConfidence: 85")
    0.85
    >>> parse_verbal_confidence(" A. fire hydrant\\nConfidence: 10", truncated=True)
    nan
    """
    text = text or ""
    for label in _LABEL_RE.finditer(text):
        m = _NUMBER_RE.match(text, label.end())
        if m is None:
            continue  # no number after this label (a placeholder, a word): try the next label
        pos = m.end()
        if _RANGE_RE.match(text, pos) and not (m.group("frac") or m.group("exp")):
            continue  # an echoed range such as "0 to 100" is not a value
        if m.group("sign") or m.group("frac") or m.group("exp") or len(m.group("int")) > 3:
            return math.nan
        value = int(m.group("int"))
        frac = _FRACTION_RE.match(text, pos)
        if frac is not None:
            if frac.group("den") != "100":
                return math.nan
            pos = frac.end()
        else:
            pct = _PERCENT_RE.match(text, pos)
            if pct is not None:
                pos = pct.end()
        if value > 100:
            return math.nan
        if truncated and _OPEN_END_RE.fullmatch(text, pos) is not None:
            return math.nan  # the number touches the end of a continuation cut by the token limit
        return value / 100.0
    return math.nan


def continuation_stop(tokens: Sequence[int], eos_token_ids, max_new_tokens: int) -> float:
    """How a greedy continuation ended (the ``verbal_stop`` read-out).

    Parameters
    ----------
    tokens : sequence of int
        The generated tokens, in order (an end-of-sequence token, if any, included).
    eos_token_ids : collection of int
        Tokens that end a continuation (:attr:`murk.readout.VLM.eos_token_ids`).
    max_new_tokens : int
        The token limit (``readout.verbal_max_new_tokens``, 12).

    Returns
    -------
    float
        :data:`VERBAL_STOP_EOS` (0.0) if an end-of-sequence token was generated,
        :data:`VERBAL_STOP_LIMIT` (1.0) otherwise (the limit was reached; also for a
        sequence shorter than the limit without one, which only a caller's own
        stopping rule can produce).
    """
    eos = set(int(i) for i in eos_token_ids)
    return VERBAL_STOP_EOS if any(int(t) in eos for t in tokens) else VERBAL_STOP_LIMIT


def until_eos(tokens: Sequence[int], eos_token_ids) -> list[int]:
    """The tokens up to and including the first end-of-sequence token.

    Parameters
    ----------
    tokens : sequence of int
        Generated tokens, in order.
    eos_token_ids : collection of int
        Tokens that end a continuation (:attr:`murk.readout.VLM.eos_token_ids`).

    Returns
    -------
    list of int
        ``tokens`` cut after the first end-of-sequence token (all of them if there is none).
    """
    eos = set(int(i) for i in eos_token_ids)
    out = []
    for t in tokens:
        out.append(int(t))
        if int(t) in eos:
            break
    return out
