"""The chapter layer: one module per chapter, holding what that chapter prints and nothing else.

Each module turns the domain modules' results into the small frames, sentences and glued numbers its
chapter shows; the rules themselves live in the module of their idea (:mod:`pdtune.state`,
:mod:`pdtune.memory`, :mod:`pdtune.capacity`, :mod:`pdtune.frontier`, :mod:`pdtune.perfmodel`, ...), so a
notebook imports its chapter module, the domain modules and the chart builders, and holds no logic.

* :mod:`.state` — chapter 1, per-request state (and the per-request sentence chapters 2-4 quote);
* :mod:`.state_text` — chapter 1's few sentences whose wording branches on the scenario;
* :mod:`.memory` — chapter 2, the memory waterfall (and the reserve check chapter 3 repeats);
* :mod:`.graphs` — chapter 3, activation peak and CUDA graphs;
* :mod:`.concurrency` — chapter 4, concurrency per engine;
* :mod:`.prefill` — chapter 5, prefill isolation (and the reading of an isolated sweep chapter 6 reuses);
* :mod:`.decode` — chapter 6, decode isolation;
* :mod:`.frontier` — chapter 7, the disaggregated frontier (and the measured vLLM disaggregated frontier);
* :mod:`.trust` — chapter 8, how far to trust a prediction: the model scored on real runs (and the measured
  sweeps chapters 5 and 6 draw);
* :mod:`.scheduler` — chapter 8's section on what the scheduler does to latency: two simulated cases and a
  measured sweep beside both latency models;
* :mod:`.plan` — chapter 9, plan before you measure: the search, the picks, the KV transfer, a recipe;
* :mod:`.display` — what every chapter shares: styled tables, glued numbers, formatted values.

The Reproduce page (the book's last) is prose without code cells, so it has no module. Loading a
scenario's benchmark results for chapters 5-7 is :mod:`pdtune.sweep`.
"""
