/**
 * The queue behind group commit and group read: items that arrive while a batch is running wait,
 * and the next batch takes as many of them as `takeBatch` allows. One batch runs at a time.
 * `runBatch` settles every item it is given and never throws.
 */
export function createSerialBatches<T>(
  takeBatch: (queue: T[]) => T[],
  runBatch: (batch: T[]) => Promise<void>,
): (item: T) => void {
  const queue: T[] = [];
  let running = false;

  async function drain(): Promise<void> {
    running = true;
    try {
      while (queue.length > 0) await runBatch(takeBatch(queue));
    } finally {
      running = false;
    }
  }

  return (item) => {
    queue.push(item);
    if (!running) void drain();
  };
}
