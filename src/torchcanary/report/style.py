"""The style sheet every HTML page of torchcanary inlines (a run's report, a fleet's).

One sheet, so the pages read alike; inline, so each page is one file that opens offline.
"""

PAGE_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1400px;color:#222}
h1{margin-bottom:.2rem} table{border-collapse:collapse;width:100%;margin:.6rem 0}
th,td{border:1px solid #ddd;padding:.35rem .5rem;vertical-align:top;text-align:left}
th{background:#f4f4f4} pre{background:#f8f8f8;padding:.5rem;overflow:auto;max-height:24rem}
td{overflow-wrap:anywhere} td pre{white-space:pre-wrap}
table.claims{table-layout:fixed} table.claims th:nth-child(1){width:18%}
table.claims th:nth-child(2){width:37%} table.claims th:nth-child(n+3){width:15%}
.badge{display:inline-block;padding:.05rem .45rem;border-radius:.6rem;font-size:.85em;
 background:#eee;white-space:nowrap}
.confirmed,.go,.already-in-baseline,.new-in-candidate,.passed,.faster,.same{background:#d4edda}
.refuted,.regressed,.no-go,.failed,.slower,.crashed,.timeout,.error{background:#f8d7da}
.absent,.not-reproduced{background:#fff3cd} .not-checkable-here,.unverified-here{background:#e2e3e5}
.summary,.quote,.needs{font-size:.85em;color:#555;margin-top:.2rem}
.decision{font-size:1.4rem;padding:.6rem 1rem;border-radius:.4rem;display:inline-block}
.confound{background:#fff3cd;padding:.5rem 1rem;border-left:4px solid #e0a800}
"""
