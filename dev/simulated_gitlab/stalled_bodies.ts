/** Responses whose body never arrives, for the `timeout` failure, and ending them on close. */

/** Hands out stalled responses and remembers the ones still open. */
export interface StalledBodies {
  /** A 200 whose body never arrives: the client sees headers, then nothing until its timeout. */
  response(): Response;
  /** Ends every stalled body still open. */
  endAll(): void;
}

/**
 * Creates an empty set of stalled bodies. (Waiting before the headers would need
 * `request.signal` to notice the client leaving, and Deno warns about that signal's legacy
 * semantics.) The server cancels a body when its client disconnects; `endAll` ends the rest.
 */
export function createStalledBodies(): StalledBodies {
  const open = new Set<() => void>();

  function response(): Response {
    let end = () => {};
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        end = () => {
          open.delete(end);
          try {
            controller.close();
          } catch {
            // Already closed or cancelled.
          }
        };
        open.add(end);
      },
      cancel() {
        open.delete(end);
      },
    });
    return new Response(body, {
      status: 200,
      headers: { "Content-Type": "application/json; charset=utf-8" },
    });
  }

  return {
    response,
    endAll() {
      for (const end of [...open]) end();
    },
  };
}
