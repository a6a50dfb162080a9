from loopx.cli import main

main()
