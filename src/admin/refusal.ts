/** How an operator command refuses. */

/**
 * A command that refuses before changing anything: the CLI prints the message and exits with
 * `exitCode` (1: the setup is incomplete; 2: the arguments do not say what to do).
 */
export class AdminRefusal extends Error {
  override name = "AdminRefusal";
  constructor(message: string, readonly exitCode = 1) {
    super(message);
  }
}
