-- murk: text that pandoc's Typst writer leaves as Typst shorthands ("..." an ellipsis, "-?" a soft hyphen) is
-- written with its punctuation escaped, so that a value (a model's folder name, murk.report.markdown_text) prints
-- in the PDF as it is written. Other formats are untouched. Run by Quarto (_quarto.yml, filters:) and by
-- murk.report.render_paper.
if not FORMAT:match("typst") then
  return {}
end

function Str(el)
  if el.text:find("...", 1, true) or el.text:find("-?", 1, true) then
    return pandoc.RawInline("typst", (el.text:gsub("%p", "\\%0")))
  end
end
