from services.console.main import main

main()
