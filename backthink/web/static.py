"""The page's stylesheet and its one script, served from the package (no build step)."""

from __future__ import annotations

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #222; background: #fafaf7; }
nav { padding: .5rem 1rem; background: #333; }
nav a { color: #eee; margin-right: 1rem; }
main { padding: .5rem 1.2rem 2rem; max-width: 70rem; }
h1 { font-size: 1.4rem; margin: .6rem 0 .2rem; }
h2 { font-size: 1.1rem; margin: 1.2rem 0 .3rem; }
h3 { font-size: .95rem; margin: .8rem 0 .2rem; color: #555; }
.days a { margin-right: 1rem; }
svg.timeline { width: 100%; height: auto; display: block; margin: .4rem 0; }
svg .day { fill: #fff; stroke: #ccc; }
svg .quiet { fill: #dfe3f0; }
svg .owner { fill: #d08a2e; }
svg .tick { stroke: #999; }
svg .hour { font-size: 10px; fill: #666; text-anchor: middle; }
svg .label { font-size: 10px; fill: #1f7a3a; text-anchor: middle; }
svg .mark circle { stroke: #fff; stroke-width: 1; }
.outcome-delivered { --c: #1f9d4c; }
.outcome-suppressed { --c: #8a8f98; }
.outcome-skipped { --c: #c9b458; }
.outcome-failed { --c: #d33c3c; }
svg .mark circle { fill: var(--c); }
.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 1rem; }
.legend .dot { display: inline-block; width: .7rem; height: .7rem; border-radius: 50%;
  background: var(--c); margin-right: .3rem; }
.legend .quiet-key::before, .legend .owner-key::before { content: ""; display: inline-block;
  width: 1rem; height: .7rem; margin-right: .3rem; }
.legend .quiet-key::before { background: #dfe3f0; }
.legend .owner-key::before { background: #d08a2e; }
.status { border: 1px solid #ccc; padding: .4rem .8rem; background: #fff; }
.status.paused { border-color: #c9b458; background: #fffbe8; }
dl { display: grid; grid-template-columns: max-content auto; gap: .1rem 1rem; margin: .4rem 0; }
dt { color: #666; }
dd { margin: 0; }
form.inline { display: inline; }
table.rounds { border-collapse: collapse; width: 100%; }
table.rounds td, table.rounds th { text-align: left; padding: .15rem .5rem;
  border-bottom: 1px solid #eee; vertical-align: top; }
table.rounds tr td:nth-child(3) { color: var(--c); font-weight: 600; }
pre { white-space: pre-wrap; word-break: break-word; background: #fff; border: 1px solid #ddd;
  padding: .4rem .6rem; margin: .2rem 0; }
.verdict b { color: var(--c); }
.empty { color: #888; }
ul.memories li { margin: .3rem 0; }
ul.memories .kind { color: #666; font-size: .85em; }
button.forget { margin-left: .5rem; font-size: .8em; }
"""

# Reloads today's page when a newer round is recorded; without it the page just stays as loaded.
JS = """
(function () {
  var body = document.body;
  if (!body.hasAttribute("data-refresh")) { return; }
  var newest = body.getAttribute("data-newest") || "";
  setInterval(function () {
    fetch("/api/rounds?limit=1", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : []; })
      .then(function (rows) {
        var id = rows.length ? rows[0].round_id : "";
        if (id !== newest) { location.reload(); }
      })
      .catch(function () {});
  }, 15000);
})();
"""
