/**
 * Stripe's request encoding: `application/x-www-form-urlencoded` with bracket notation, as the
 * `stripe` SDK writes it (`stringifyRequestData` in stripe-node's `src/utils.ts`): `a[b]=1` is a
 * nested object, `a[0]=x` an array element, `a[]=x` an appended element; the same for query strings.
 */
export type FormValue = string | FormValue[] | { [key: string]: FormValue };
export type FormParams = Record<string, FormValue>;

export function decodeForm(text: string): FormParams {
  const root: Record<string, unknown> = {};
  for (const [key, value] of new URLSearchParams(text)) {
    const path = splitKey(key);
    let node: Record<string, unknown> = root;
    for (let i = 0; i < path.length - 1; i++) {
      const segment = path[i] || String(Object.keys(node).length);
      const next = node[segment];
      if (typeof next !== 'object' || next === null) node[segment] = {};
      node = node[segment] as Record<string, unknown>;
    }
    node[path.at(-1) || String(Object.keys(node).length)] = value;
  }
  return toArrays(root) as FormParams;
}

/** `a[b][0]` → `['a', 'b', '0']`. */
function splitKey(key: string): string[] {
  const open = key.indexOf('[');
  if (open <= 0 || !key.endsWith(']')) return [key];
  return [key.slice(0, open), ...key.slice(open + 1, -1).split('][')];
}

/** Objects whose keys are exactly 0..n-1 become arrays (Stripe's `items[0][price]`). */
function toArrays(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record);
  for (const key of keys) record[key] = toArrays(record[key]);
  const indexed = keys.length > 0 && keys.every((key, i) => key === String(i));
  return indexed ? keys.map((key) => record[key]) : record;
}
