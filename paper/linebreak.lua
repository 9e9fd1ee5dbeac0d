-- murk: a raw HTML line break inside a table cell ("0.99<br>[0.97, 1.00]", murk.paper.CELL_BREAK)
-- becomes a line break in every output format (HTML <br />, Typst \), so that a cell can hold an
-- estimate above its interval. Run by Quarto (_quarto.yml, filters:) and by murk.paper.render_paper.
function RawInline(el)
  if el.format:match("^html") and el.text:match("^<br%s*/?>$") then
    return pandoc.LineBreak()
  end
end
