-- murk: the paper's sections are numbered as the spec numbers its own, so that a reviewer can hold the
-- two side by side: top-level sections in Roman numerals (I Introduction ... VI Limitations), their
-- subsections in capitals (IV-A is "A." under "IV."), appendices "Appendix A.", "Appendix B." (class
-- .appendix); a heading of class .unnumbered (Abstract, References) gets no number.
-- Quarto's own number-sections would number in Arabic (its crossref option sec-labels is not applied to
-- sections), so the numbering is this filter's, in both renderers: Quarto (_quarto.yml, filters:) and
-- murk.paper.render_paper (pandoc, HTML and Typst); murk.paper.SPEC_SECTIONS lists the spec's I-VI.

local function roman(n)
  local out = ""
  for _, p in ipairs({{1000, "M"}, {900, "CM"}, {500, "D"}, {400, "CD"}, {100, "C"}, {90, "XC"},
                      {50, "L"}, {40, "XL"}, {10, "X"}, {9, "IX"}, {5, "V"}, {4, "IV"}, {1, "I"}}) do
    while n >= p[1] do
      out = out .. p[2]
      n = n - p[1]
    end
  end
  return out
end

local function letter(n)
  return string.char(64 + n)
end

function Pandoc(doc)
  local top, sub, app, in_appendix = 0, 0, 0, false
  doc.blocks = doc.blocks:walk({
    Header = function(h)
      if h.level > 2 then
        return nil
      end
      if h.level == 1 then
        sub = 0
        in_appendix = h.classes:includes("appendix")
      end
      if h.classes:includes("unnumbered") then
        return nil
      end
      local label
      if h.level == 1 and in_appendix then
        app = app + 1
        label = "Appendix " .. letter(app) .. "."
      elseif h.level == 1 then
        top = top + 1
        label = roman(top) .. "."
      else
        sub = sub + 1
        label = letter(sub) .. "."
      end
      h.content:insert(1, pandoc.Space())
      h.content:insert(1, pandoc.Span({pandoc.Str(label)}, pandoc.Attr("", {"section-number"})))
      return h
    end,
  })
  return doc
end
