/**
 * GitLab's OAuth scopes in words, for the pages that say what the application will be able to
 * do with the user's account.
 *
 * @see https://docs.gitlab.com/integration/oauth_provider/#view-all-authorized-applications
 */

export const GITLAB_SCOPE_WORDS: Readonly<Record<string, string>> = {
  api: "Read and write access to your projects, groups and account through the API",
  read_api: "Read access to your projects, groups and account through the API",
  read_user: "Read access to your profile: username, name and public email",
  read_repository: "Read access to the code of your repositories (Git pull)",
  write_repository: "Read and write access to the code of your repositories (Git push)",
  read_registry: "Read access to your container registry images",
  write_registry: "Write access to your container registry images",
  read_virtual_registry: "Read access to your packages through the dependency proxy",
  write_virtual_registry: "Write access to your packages through the dependency proxy",
  sudo: "Act as any user of the instance, if you are an administrator",
  admin_mode: "Administrator actions, if you are an administrator in Admin Mode",
  openid: "Confirm who you are (OpenID Connect)",
  profile: "Read access to your profile: name, username and avatar (OpenID Connect)",
  email: "Read access to your primary email address (OpenID Connect)",
  create_runner: "Create CI/CD runners",
  manage_runner: "Manage CI/CD runners",
  ai_features: "Use GitLab Duo AI features",
  k8s_proxy: "Call Kubernetes clusters through the GitLab agent",
  read_service_ping: "Read Service Ping data, if you are an administrator",
  self_rotate: "Rotate its own access token",
};
