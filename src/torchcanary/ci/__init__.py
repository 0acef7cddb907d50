"""torchcanary in a team's CI: ``ci init`` writes a GitHub Actions workflow or a GitLab CI
job from the templates here (``templates/``), and ``ci comment`` posts or updates the one
pull-request comment each run leaves."""
