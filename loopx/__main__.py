from loopx.entry import main

main()
