// Live convergence plots (uPlot): the gap against iteration and against time on a log scale,
// and the objectives when the solver reports them. Tolerant of the record's fields: every
// gap-like and objective field present is drawn; `gap` always is. A search job solves one
// problem per fold and C, each from its own first gap, so its plot (`SearchPlot`) keeps one line
// per fold holding that fold's current solve only, and one for the refit.

const GAP_FIELDS = ["gap", "duality_gap", "pg_range", "max_violation"];
const OBJECTIVE_FIELDS = ["primal", "dual", "upper_bound", "lower_bound"];
const COLORS = ["#1f5fbf", "#1e7b3c", "#c26a00", "#7a3fb0", "#b3261e", "#00838f", "#6d4c41",
                "#5b6475"];
const positive = (v) => (typeof v === "number" && v > 0 && isFinite(v) ? v : null);
const finite = (v) => (typeof v === "number" && isFinite(v) ? v : null);

const tick = (v) => (v === null ? "" : v >= 1e-3 && v < 1e5 ? String(+v.toPrecision(3))
                                                           : v.toExponential(0));

function chart(title, xLabel, yLabel, fields, logY, el) {
  const series = [{ label: xLabel }, ...fields.map((name, i) => ({
    label: name, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true,
    points: { show: true, size: 4 },
  }))];
  return new uPlot({
    title, width: 540, height: 260,
    scales: { x: { time: false }, y: logY ? { distr: 3 } : {} },
    axes: [{ label: xLabel }, logY ? { label: yLabel, size: 70, values: (u, vs) => vs.map(tick) }
                                   : { label: yLabel, size: 70 }],
    series,
  }, [[], ...fields.map(() => [])], el);
}

function figureIn(container, caption, id) {
  const fig = document.createElement("figure");
  fig.id = id;
  fig.dataset.points = "0";
  fig.setAttribute("role", "img");
  fig.setAttribute("aria-label", caption);
  const cap = document.createElement("figcaption");
  cap.textContent = caption;
  fig.append(cap);
  container.append(fig);
  return fig;
}

export class ConvergencePlots {
  constructor(container) {
    this.records = [];
    this.gapFields = ["gap"];
    this.objectiveFields = [];
    this.container = container;
    this.figures = {
      iteration: this.figure("Gap against iteration (log scale)", "plot-iteration"),
      time: this.figure("Gap against time (log scale)", "plot-time"),
      objectives: this.figure("Objectives against iteration", "plot-objectives"),
    };
    this.figures.objectives.hidden = true;
    this.build();
  }

  figure(caption, id) { return figureIn(this.container, caption, id); }

  build() {
    for (const plot of Object.values(this.plots || {})) plot.destroy();
    const f = this.figures;
    this.plots = {
      iteration: chart("", "iteration", "gap", this.gapFields, true, f.iteration),
      time: chart("", "seconds", "gap", this.gapFields, true, f.time),
    };
    if (this.objectiveFields.length) {
      f.objectives.hidden = false;
      this.plots.objectives = chart("", "iteration", "objective", this.objectiveFields, false,
                                    f.objectives);
    }
  }

  add(record) {
    this.records.push(record);
    const newGap = GAP_FIELDS.filter((k) => k in record && record[k] !== null
                                     && !this.gapFields.includes(k));
    const newObj = OBJECTIVE_FIELDS.filter((k) => finite(record[k]) !== null
                                           && !this.objectiveFields.includes(k));
    if (newGap.length || newObj.length) {
      this.gapFields = GAP_FIELDS.filter((k) => this.gapFields.includes(k) || newGap.includes(k));
      this.objectiveFields = OBJECTIVE_FIELDS.filter(
        (k) => this.objectiveFields.includes(k) || newObj.includes(k));
      this.build();
    }
    if (!this.pending) {
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.redraw(); });
    }
  }

  redraw() {
    const rs = this.records;
    const its = rs.map((r) => r.iteration);
    const gaps = this.gapFields.map((k) => rs.map((r) => positive(r[k])));
    this.plots.iteration.setData([its, ...gaps]);
    this.plots.time.setData([rs.map((r) => r.elapsed_s), ...gaps]);
    if (this.plots.objectives) {
      this.plots.objectives.setData([its, ...this.objectiveFields.map((k) => rs.map((r) => finite(r[k])))]);
    }
    for (const fig of Object.values(this.figures)) fig.dataset.points = String(rs.length);
  }

  destroy() { for (const plot of Object.values(this.plots)) plot.destroy(); }
}

// A search's gap against iteration: one line per fold, holding the points of that fold's
// current solve (it starts again when the fold moves to its next C, or when the iterations
// start again), and one for the refit. Folds run in parallel, so "the current solve" alone
// would jump between them; all the solves of the path at once (folds × Cs lines, each from its
// own first gap) would hide the ones running. The path's progress itself is the job's facts.
export class SearchPlot {
  constructor(container) {
    this.lines = new Map();  // label -> { solve, C, last, points: Map(iteration -> gap) }
    this.figure = figureIn(container, "Gap of each fold's current solve against iteration "
                           + "(log scale); a line starts again at its fold's next C", "plot-search");
    this.figure.dataset.lines = "0";
    this.build();
  }

  build() {
    if (this.plot) this.plot.destroy();
    const labels = this.labels();
    const fields = labels.map((label) => `${label} · C ${+this.lines.get(label).C.toPrecision(4)}`);
    this.plot = chart("", "iteration", "gap", fields.length ? fields : ["gap"], true, this.figure);
  }

  // folds in order, the refit last
  labels() {
    const order = (label) => (label === "refit" ? Infinity : Number(label.split(" ")[1]));
    return [...this.lines.keys()].sort((a, b) => order(a) - order(b));
  }

  add(record) {
    const refit = record.stage === "refit";
    const label = refit ? "refit" : `fold ${(record.fold ?? 0) + 1}`;
    const solve = refit ? "refit" : record.c_index;
    let line = this.lines.get(label);
    // a solve's end repeats its last pass (same iteration): it stays on the line
    const restart = !line || line.solve !== solve || record.iteration < line.last;
    if (restart) {
      line = { solve, C: record.C ?? NaN, last: -Infinity, points: new Map() };
      this.lines.set(label, line);
      this.stale = true;  // the legend names each line's C
    }
    line.last = record.iteration;
    line.points.set(record.iteration, positive(record.gap));
    if (!this.pending) {
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.redraw(); });
    }
  }

  redraw() {
    if (this.stale) { this.stale = false; this.build(); }
    const labels = this.labels();
    const xs = [...new Set(labels.flatMap((l) => [...this.lines.get(l).points.keys()]))]
      .sort((a, b) => a - b);
    const ys = labels.map((l) => xs.map((x) => this.lines.get(l).points.get(x) ?? null));
    this.plot.setData([xs, ...(ys.length ? ys : [[]])]);
    const points = labels.reduce((n, l) => n + this.lines.get(l).points.size, 0);
    this.figure.dataset.points = String(points);
    this.figure.dataset.lines = String(labels.length);
  }

  destroy() { this.plot.destroy(); }
}

// Tick labels with the fewest decimals that tell every tick apart: uPlot's own keep at most
// three, so close scores (0.8472 .. 0.8475) read "0.847" on every tick.
function distinctLabels(values) {
  for (let digits = 0; digits < 10; digits++) {
    const labels = values.map((v) => (v === null ? "" : v.toFixed(digits)));
    if (new Set(labels).size === labels.length) return labels;
  }
  return values.map((v) => (v === null ? "" : String(v)));
}

// Score against C (log scale) for a model that came from a search.
export function scorePlot(el, Cs, scores) {
  const plot = new uPlot({
    width: 540, height: 240,
    scales: { x: { time: false, distr: 3 } },
    // uPlot's own labels print a C of 1e-4 as "0"
    axes: [{ label: "C", values: (u, vs) => vs.map(tick) },
           { label: "score", size: 70, values: (u, vs) => distinctLabels(vs) }],
    series: [{ label: "C" }, { label: "mean score", stroke: COLORS[0], width: 2, points: { size: 6 } }],
  }, [Cs, scores], el);
  el.dataset.points = String(Cs.length);
  return plot;
}
