"""Formulas in the docs become MathML (rendered by the browser, offline); code and prices are left alone."""

from __future__ import annotations

import markdown
import pytest

from docs.sitegen.mathml import MathExtension, latex_to_mathml


def render(text: str) -> str:
    return markdown.Markdown(extensions=[MathExtension(), "pymdownx.superfences"]).convert(text)


def test_inline_and_display_formulas_become_mathml_and_code_does_not():
    html = render("Scores $s^e_i = \\cos(a, c_i)$, `echo $HOME`, a price of $5 or $10.\n\n"
                  "$$\nf(S) = \\sum_i e_i\n$$\n\n```bash\necho $X and $Y$\n```\n")
    assert html.count('<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">') == 1
    assert html.count('display="block"') == 1 and '<p class="formula">' in html
    assert "<code>echo $HOME</code>" in html and "a price of $5 or $10." in html
    assert "$X" in html and "<msubsup><mi>s</mi><mi>i</mi><mi>e</mi></msubsup>" in html


def test_the_method_page_formulas_all_render():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "concepts" / "method.md").read_text(encoding="utf-8")
    html = render(page)
    assert html.count('display="block"') == page.count("\n$$\n") // 2 >= 6
    assert "$$" not in html


def test_a_formula_that_does_not_parse_names_itself():
    with pytest.raises(ValueError, match=r"cannot render the formula 'a\^\{': MissingSuperScriptOrSubscriptError"):
        latex_to_mathml("a^{", display=True)
