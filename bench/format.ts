/** How the bench writes numbers, in its progress lines and in its report alike. */

/** Microseconds as milliseconds: 2 decimals below 10 ms, 1 above. */
export function ms(us: number): string {
  return (us / 1000).toFixed(us < 10_000 ? 2 : 1);
}

/** A count with thousands separators ("100,000"). */
export function count(n: number): string {
  return n.toLocaleString("en-US");
}
