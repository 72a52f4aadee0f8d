// One clock for the whole page, ticking once a second. Components subscribe to what they
// need of it (a countdown's text, whether an interrupt has expired), so a tick re-renders
// only what changed, not every card of a long inbox.

import { useSyncExternalStore } from "react";

let skew = 0;
let now = Date.now();
const listeners = new Set<() => void>();
setInterval(() => {
  now = Date.now() + skew;
  for (const listener of listeners) listener();
}, 1000);

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Align the page's clock with the server's (its `now` in each listing). */
export function setServerNow(serverMs: number): void {
  skew = serverMs - Date.now();
  now = serverMs;
}

export function currentNow(): number {
  return now;
}

/** `pick(now)` re-evaluated each tick; the component re-renders only when it changes. */
export function useClock<T extends string | number | boolean>(pick: (now: number) => T): T {
  return useSyncExternalStore(subscribe, () => pick(now));
}
