/** The fake GitLab's CI ID tokens: the simulated GitLab's keys and claims, in process. */

export { FakeGitLabIdTokens, gitlabJobClaims } from "../dev/simulated_gitlab/id_tokens.ts";
