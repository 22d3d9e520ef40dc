/**
 * A small metrics registry and its Prometheus text exposition (format 0.0.4): counters and
 * histograms with labels, gauges read when scraped. Each label combination is a child kept under
 * its label values joined into one string, so an increment on a hot path is one string, one map
 * lookup and an addition. One registry per app (AppDeps), never a module-level one. It knows
 * nothing of this service (the service's metrics are src/metrics/catalog.ts), so it sits on the
 * ground floor beside the other kit every request uses.
 *
 * @see https://prometheus.io/docs/instrumenting/exposition_formats/
 */

/** A family's labels: each label's name and the values it takes. */
export type LabelSet = Record<string, string>;

/** No labels. */
export type NoLabels = Record<never, string>;

/** The label set of a family without labels. */
export const NO_LABELS: NoLabels = {};

const NAME_PATTERN = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_PATTERN = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** What a bounded label's value must not hold (it also keeps KEY_SEPARATOR out). */
// deno-lint-ignore no-control-regex -- control characters are what it looks for
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;
/** Separates label values in a child's key; never part of a value we record. */
const KEY_SEPARATOR = "\u0000";

/** One series' counts as another worker sends them: a counter's value, or a histogram's. */
export type SeriesCounts = number | HistogramCounts;

/** A histogram series' counts: per bucket (not cumulative, the last is +Inf), sum and count. */
export interface HistogramCounts {
  counts: number[];
  sum: number;
  count: number;
}

/**
 * A registry's counts, to be added to another worker's at a scrape: by family name, then by
 * the series' label text (`name="value",...`, escaped; empty without labels).
 */
export type Snapshot = Record<string, Record<string, SeriesCounts>>;

/** What every metric family renders, with the same family's counts of other workers. */
interface Family {
  readonly name: string;
  render(lines: string[], others: readonly Record<string, SeriesCounts>[]): void | Promise<void>;
  /** This process's counts (gauges, read from the shared store, have none). */
  snapshot?(): Record<string, SeriesCounts>;
}

/** What a family is made of. */
export interface FamilyOptions<T extends LabelSet> {
  name: string;
  help: string;
  labelNames: readonly (keyof T & string)[];
  /** Label combinations shown (at 0) before anything happened, so `rate()` sees the start. */
  initial?: readonly T[];
}

/** The metric families of one app, rendered in the order they were made. */
export class Registry {
  readonly #families: Family[] = [];
  readonly #names = new Set<string>();

  counter<T extends LabelSet>(options: FamilyOptions<T>): Counter<T> {
    return this.#add(new Counter(options));
  }

  histogram<T extends LabelSet>(
    options: FamilyOptions<T> & { buckets: readonly number[] },
  ): Histogram<T> {
    return this.#add(new Histogram(options));
  }

  /** A gauge whose value `read` answers at each scrape (undefined: no sample this time). */
  gauge(
    options: { name: string; help: string; read: () => Promise<number | undefined> },
  ): void {
    this.#add({
      name: options.name,
      async render(lines: string[]) {
        lines.push(...header(options.name, options.help, "gauge"));
        const value = await options.read();
        if (value !== undefined) lines.push(`${options.name} ${formatNumber(value)}`);
      },
    });
  }

  /**
   * The whole exposition, ending with a newline: each counter and histogram series adds the
   * counts `others` (the other workers' snapshots) have for it.
   */
  async render(others: readonly Snapshot[] = []): Promise<string> {
    const lines: string[] = [];
    for (const family of this.#families) {
      const theirs = others.map((snapshot) => snapshot[family.name]).filter((s) => s !== undefined);
      await family.render(lines, theirs);
    }
    return lines.join("\n") + "\n";
  }

  /** Every counter's and histogram's counts, for another worker's scrape. */
  snapshot(): Snapshot {
    const snapshot: Snapshot = {};
    for (const family of this.#families) {
      if (family.snapshot) snapshot[family.name] = family.snapshot();
    }
    return snapshot;
  }

  #add<F extends Family>(family: F): F {
    if (!NAME_PATTERN.test(family.name)) throw new TypeError(`bad metric name ${family.name}`);
    if (this.#names.has(family.name)) throw new TypeError(`duplicate metric ${family.name}`);
    this.#names.add(family.name);
    this.#families.push(family);
    return family;
  }
}

/** Children by label values, made on first use. */
abstract class LabelledFamily<T extends LabelSet, C> implements Family {
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly (keyof T & string)[];
  protected readonly children = new Map<string, { labels: string; child: C }>();

  constructor(options: FamilyOptions<T>) {
    for (const label of options.labelNames) {
      if (!LABEL_PATTERN.test(label) || label === "le") throw new TypeError(`bad label ${label}`);
    }
    this.name = options.name;
    this.help = options.help;
    this.labelNames = options.labelNames;
    for (const labels of options.initial ?? []) this.childOf(labels);
  }

  abstract render(lines: string[], others: readonly Record<string, SeriesCounts>[]): void;
  abstract snapshot(): Record<string, SeriesCounts>;
  protected abstract newChild(): C;

  protected childOf(labels: T): C {
    const key = this.keyOf(labels);
    const found = this.children.get(key);
    if (found) return found.child;
    const child = this.newChild();
    this.children.set(key, { labels: this.labelText(labels), child });
    return child;
  }

  private keyOf(labels: T): string {
    const names = this.labelNames;
    if (names.length === 1) return labels[names[0]];
    let key = "";
    for (let i = 0; i < names.length; i++) {
      key = i === 0 ? labels[names[i]] : key + KEY_SEPARATOR + labels[names[i]];
    }
    return key;
  }

  /** `name="value",...` with values escaped; empty without labels. */
  private labelText(labels: T): string {
    return this.labelNames.map((name) => `${name}="${escapeLabelValue(labels[name])}"`).join(",");
  }
}

/** A count that only goes up. */
export class Counter<T extends LabelSet> extends LabelledFamily<T, { value: number }> {
  inc(labels: T, by = 1): void {
    this.childOf(labels).value += by;
  }

  /** The current value for `labels` (0 when never counted). */
  get(labels: T): number {
    return this.childOf(labels).value;
  }

  protected newChild() {
    return { value: 0 };
  }

  snapshot(): Record<string, number> {
    const values: Record<string, number> = {};
    for (const { labels, child } of this.children.values()) values[labels] = child.value;
    return values;
  }

  render(lines: string[], others: readonly Record<string, SeriesCounts>[]): void {
    lines.push(...header(this.name, this.help, "counter"));
    const values = new Map(Object.entries(this.snapshot()));
    for (const other of others) {
      for (const [labels, value] of Object.entries(other)) {
        if (typeof value === "number") values.set(labels, (values.get(labels) ?? 0) + value);
      }
    }
    for (const [labels, value] of values) {
      lines.push(`${this.name}${braced(labels)} ${formatNumber(value)}`);
    }
  }
}

interface HistogramChild {
  /** Per bucket, not cumulative; the last is +Inf. */
  counts: Float64Array;
  sum: number;
  count: number;
}

/** Observations counted in cumulative buckets, with their sum. */
export class Histogram<T extends LabelSet> extends LabelledFamily<T, HistogramChild> {
  readonly buckets: readonly number[];

  constructor(options: FamilyOptions<T> & { buckets: readonly number[] }) {
    const sorted = options.buckets.every((b, i, all) => i === 0 || all[i - 1] < b);
    if (!sorted || options.buckets.length === 0) throw new TypeError("buckets must increase");
    // Set before the initial children, which need it.
    super({ ...options, initial: [] });
    this.buckets = options.buckets;
    for (const labels of options.initial ?? []) this.childOf(labels);
  }

  observe(labels: T, value: number): void {
    const child = this.childOf(labels);
    const buckets = this.buckets;
    let i = 0;
    while (i < buckets.length && value > buckets[i]) i++;
    child.counts[i]++;
    child.sum += value;
    child.count++;
  }

  /** How many observations `labels` has. */
  count(labels: T): number {
    return this.childOf(labels).count;
  }

  protected newChild(): HistogramChild {
    return { counts: new Float64Array(this.buckets.length + 1), sum: 0, count: 0 };
  }

  snapshot(): Record<string, HistogramCounts> {
    const series: Record<string, HistogramCounts> = {};
    for (const { labels, child } of this.children.values()) {
      series[labels] = { counts: [...child.counts], sum: child.sum, count: child.count };
    }
    return series;
  }

  render(lines: string[], others: readonly Record<string, SeriesCounts>[]): void {
    lines.push(...header(this.name, this.help, "histogram"));
    const series = new Map(Object.entries(this.snapshot()));
    for (const other of others) {
      for (const [labels, theirs] of Object.entries(other)) {
        if (!this.#fits(theirs)) continue;
        const ours = series.get(labels);
        series.set(labels, ours ? addHistograms(ours, theirs) : theirs);
      }
    }
    for (const [labels, child] of series) {
      const prefix = labels === "" ? "" : `${labels},`;
      let cumulative = 0;
      for (let i = 0; i <= this.buckets.length; i++) {
        cumulative += child.counts[i];
        const le = i < this.buckets.length ? formatNumber(this.buckets[i]) : "+Inf";
        lines.push(`${this.name}_bucket{${prefix}le="${le}"} ${formatNumber(cumulative)}`);
      }
      lines.push(`${this.name}_sum${braced(labels)} ${formatNumber(child.sum)}`);
      lines.push(`${this.name}_count${braced(labels)} ${formatNumber(child.count)}`);
    }
  }

  /** Whether another worker's series has this histogram's buckets. */
  #fits(counts: SeriesCounts): counts is HistogramCounts {
    return typeof counts === "object" && counts.counts.length === this.buckets.length + 1;
  }
}

function addHistograms(a: HistogramCounts, b: HistogramCounts): HistogramCounts {
  return {
    counts: a.counts.map((count, i) => count + b.counts[i]),
    sum: a.sum + b.sum,
    count: a.count + b.count,
  };
}

/**
 * Keeps a label's values bounded whatever the input: the first `limit` distinct values seen
 * stand for themselves, every later one (and any empty, too long or with control characters)
 * is `other`.
 */
export class BoundedLabel {
  readonly #seen = new Set<string>();

  constructor(
    readonly limit: number,
    readonly other = "other",
    readonly maxLength = 100,
  ) {}

  /** Whether `value` has a label of its own. */
  has(value: string): boolean {
    return this.#seen.has(value);
  }

  of(value: string): string {
    if (this.#seen.has(value)) return value;
    if (this.#seen.size >= this.limit || !this.#admissible(value)) return this.other;
    this.#seen.add(value);
    return value;
  }

  #admissible(value: string): boolean {
    return value.length > 0 && value.length <= this.maxLength && !CONTROL_CHARACTER.test(value);
  }
}

function header(name: string, help: string, type: string): string[] {
  return [`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`];
}

function braced(labels: string): string {
  return labels === "" ? "" : `{${labels}}`;
}

function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => c === "\n" ? "\\n" : `\\${c}`);
}

function escapeHelp(help: string): string {
  return help.replace(/[\\\n]/g, (c) => c === "\n" ? "\\n" : "\\\\");
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}
