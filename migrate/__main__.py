from npu_migrate.migrate.cli import main

main()
